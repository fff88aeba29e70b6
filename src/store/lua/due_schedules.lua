-- The recurring schedules of a topic due now, by the clock of the node that
-- holds them (runs are on Redis' clock, like promotion).
--
-- KEYS[1] the topic's due ZSET (name -> next run ms)
-- ARGV[1] most names
-- Returns { now ms, { name, ... } (due, earliest first), ms of the earliest
--   next run of all, or -1 when none }

local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local first = -1
if head[1] then first = tonumber(head[2]) end
return { now, due, first }

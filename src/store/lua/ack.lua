-- Acknowledges entries: they leave the subscription's pending list (and
-- timers) for good, and are counted once each.
--
-- KEYS[1] stream, KEYS[2] timers ZSET, KEYS[3] subscription settings HASH
-- ARGV[1] group, ARGV[2..] entry ids
-- Returns the number of entries acked now (already acked ones do not count).

local ids = { unpack(ARGV, 2) }
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
redis.call('ZREM', KEYS[2], unpack(ids))
if acked > 0 then redis.call('HINCRBY', KEYS[3], 'acked', acked) end
return acked

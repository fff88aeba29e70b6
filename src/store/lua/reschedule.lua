-- Moves a scheduled message, not yet promoted, to a new due time.
--
-- KEYS[1] scheduled ZSET
-- ARGV[1] message id, ARGV[2] due kind ('a' at ms, 'd' after ms), ARGV[3] amount
-- Returns { due ms or -1 when not scheduled, now }

local now = now_ms()
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return { -1, now } end
local due = tonumber(ARGV[3])
if ARGV[2] == 'd' then due = now + due end
redis.call('ZADD', KEYS[1], 'XX', due, ARGV[1])
return { due, now }

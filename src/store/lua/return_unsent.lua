-- Gives back deliveries a stream fetched but never sent (its client left):
-- each is parked, due now, with its delivery count as before the fetch, so
-- the next consumer gets it at once and as the same attempt, not after its
-- ack deadline as a retry.
--
-- KEYS[1] stream, KEYS[2] timers ZSET
-- ARGV[1] group, then triples: id, consumer, delivery count
-- Returns the number given back.

local stream, timers, group = KEYS[1], KEYS[2], ARGV[1]
local now = now_ms()
local returned = 0
for i = 2, #ARGV, 3 do
  local id, consumer, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if holds(stream, group, id, consumer, count) then
    -- The next fetch's XCLAIM adds one back.
    redis.call('XCLAIM', stream, group, PARKED, 0, id, 'RETRYCOUNT', count - 1, 'JUSTID')
    redis.call('ZADD', timers, now, id)
    returned = returned + 1
  end
end
return returned

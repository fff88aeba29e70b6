-- Acknowledges deliveries still held by their consumer: they leave the
-- subscription's pending list (and timers) for good, and are counted once
-- each. A delivery that is no longer current (acked, nacked or redelivered
-- since) is left alone, so a stale or foreign ack id never acks what another
-- consumer now holds.
--
-- KEYS[1] stream, KEYS[2] timers ZSET, KEYS[3] subscription settings HASH
-- ARGV[1] group, then triples: id, consumer, delivery count
-- Returns the number of deliveries acked now.

local stream, timers, settings = KEYS[1], KEYS[2], KEYS[3]
local group = ARGV[1]
require_group(stream, group)

local held = {}
for i = 2, #ARGV, 3 do
  local id, consumer, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if holds(stream, group, id, consumer, count) then held[#held + 1] = id end
end
local acked = 0
in_chunks(held, function(...)
  acked = acked + redis.call('XACK', stream, group, ...)
  redis.call('ZREM', timers, ...)
end)
if acked > 0 then redis.call('HINCRBY', settings, 'acked', acked) end
return acked

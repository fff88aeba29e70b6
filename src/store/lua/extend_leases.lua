-- Sets the lease of deliveries still held by their consumer to now + ARGV[2]
-- (0 hands them back for immediate redelivery). A delivery is still held when
-- it is pending for the same consumer with the same delivery count as when it
-- was handed out; otherwise it was acked or redelivered and the lease is lost.
--
-- KEYS[1] stream, KEYS[2] leases ZSET of the subscription
-- ARGV[1] group, ARGV[2] lease length in ms, then triples: id, consumer, delivery count
-- Returns one integer per triple: 1 extended, 0 lease lost.

local stream, leases = KEYS[1], KEYS[2]
local group = ARGV[1]

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local deadline = now + tonumber(ARGV[2])

local held = {}
for i = 3, #ARGV, 3 do
  local id, consumer, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local pending = redis.call('XPENDING', stream, group, id, id, 1)
  if #pending > 0 and pending[1][2] == consumer and tonumber(pending[1][4]) == count then
    redis.call('ZADD', leases, deadline, id)
    held[#held + 1] = 1
  else
    held[#held + 1] = 0
  end
end
return held

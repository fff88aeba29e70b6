-- ModifyAckDeadline: sets the leases still held by their consumer to end at
-- now + ARGV[2] ms.
--
-- KEYS[1] stream, KEYS[2] timers ZSET
-- ARGV[1] group, ARGV[2] lease length in ms, then triples: id, consumer, delivery count
-- Returns one integer per triple: 1 extended, 0 lease lost.

local stream, timers = KEYS[1], KEYS[2]
local group = ARGV[1]
local deadline = now_ms() + tonumber(ARGV[2])
require_group(stream, group)

local held = {}
for i = 3, #ARGV, 3 do
  local id, consumer, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if holds(stream, group, id, consumer, count) then
    redis.call('ZADD', timers, deadline, id)
    held[#held + 1] = 1
  else
    held[#held + 1] = 0
  end
end
return held

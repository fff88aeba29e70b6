-- Nack: ends the leases still held by their consumer. Each message is parked
-- until now + ARGV[2] ms (or, when ARGV[2] is -1, the subscription's retry
-- backoff), or dead-lettered when it had its last attempt.
--
-- A parked entry keeps its ordering key; a dead-lettered one hands it on.
--
-- KEYS the subscription's lease keys (TopicKeys::lease_keys)
-- ARGV[1] group, ARGV[2] delay in ms or -1, then triples: id, consumer, delivery count
-- Returns { one integer per triple: 1 parked, 2 dead-lettered, 0 lease lost;
--   ordering keys handed to their next entry }

local stream, dlq = KEYS[1], KEYS[4]
local group = ARGV[1]
local delay = tonumber(ARGV[2])
local o = ordering(group, now_ms())
require_group(stream, group)

local held = {}
for i = 3, #ARGV, 3 do
  local id, consumer, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if holds(stream, group, id, consumer, count) then
    local wait = end_lease(o, dlq, id, count, delay, 'nacked')
    held[#held + 1] = wait < 0 and 2 or 1
  else
    held[#held + 1] = 0
  end
end
return { held, o.handed }

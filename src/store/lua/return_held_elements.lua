-- Gives a LIST topic's list back what redq holds of it, before the topic or
-- its subscription is deleted: the elements taken and not yet acked (the
-- entries of the topic stream, delivered or not, leased or waiting for a
-- retry) and those a blocking move left in the staging list go back to the
-- RPOP end, in the order they left it, so that they are popped next; the
-- dead letters go to the LPUSH end, oldest first. One script, so a crash
-- neither loses an element nor gives one back twice: what it gives back
-- leaves redq's keys in the same step. It deletes the topic stream (a LIST
-- topic's subscription is its one consumer group).
--
-- KEYS[1] the list, KEYS[2] staging list, KEYS[3] topic stream, KEYS[4..]
-- dead letter streams
-- Returns { elements given back to the RPOP end, dead letters pushed }

local list, staging, stream = KEYS[1], KEYS[2], KEYS[3]

-- The raw element of an entry (field `p`); nil for any other entry.
local function element_of(fields)
  for f = 1, #fields, 2 do
    if fields[f] == 'p' then return fields[f + 1] end
  end
  return nil
end

-- Oldest first: the stream's entries, then the staging list from its RPOP end.
local held = {}
for _, entry in ipairs(redis.call('XRANGE', stream, '-', '+')) do
  local element = element_of(entry[2])
  if element then held[#held + 1] = element end
end
local staged = redis.call('LRANGE', staging, 0, -1)
for i = #staged, 1, -1 do held[#held + 1] = staged[i] end
-- RPUSH newest first: the oldest ends up at the RPOP end.
local newest_first = {}
for i = #held, 1, -1 do newest_first[#newest_first + 1] = held[i] end
call_with('RPUSH', { list }, newest_first)
-- The stream goes with its consumer group: a fetch after this one finds
-- no subscription, and takes nothing more from the list.
redis.call('DEL', stream, staging)

local dead = {}
for k = 4, #KEYS do
  for _, entry in ipairs(redis.call('XRANGE', KEYS[k], '-', '+')) do
    local element = element_of(entry[2])
    if element then dead[#dead + 1] = element end
  end
  redis.call('DEL', KEYS[k])
end
call_with('LPUSH', { list }, dead)
return { #held, #dead }

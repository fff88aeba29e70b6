-- Gives dead letters back to their subscription: each is appended to the
-- topic stream again, marked `o` (only for) with the subscription so that the
-- other subscriptions skip it, and removed from the dead letters in the same
-- step, so it is redriven exactly once.
--
-- On a LIST topic (KEYS[4], its list) a dead letter's element is pushed
-- back onto the list instead (LPUSH: after what the list holds now); the
-- blocking moves of its consumers see it, no hint is needed.
--
-- KEYS[1] dead letters STREAM, KEYS[2] topic stream, KEYS[3] the topic's
-- watchers HASH, KEYS[4] a LIST topic's list (absent on other kinds)
-- ARGV[1] subscription, ARGV[2] most to redrive, ARGV[3..5] who redrives,
-- the hints channel and the hint (see hint_watchers), ARGV[6..] dead letter
-- ids (none: the oldest ones)
-- Returns the number redriven.

local dlq, stream, subscription = KEYS[1], KEYS[2], ARGV[1]
local entries
if #ARGV > 5 then
  entries = {}
  for i = 6, #ARGV do
    local entry = redis.call('XRANGE', dlq, ARGV[i], ARGV[i])[1]
    if entry then entries[#entries + 1] = entry end
  end
else
  entries = redis.call('XRANGE', dlq, '-', '+', 'COUNT', tonumber(ARGV[2]))
end

local list = KEYS[4]
if list then
  for _, entry in ipairs(entries) do
    local original = entry[2]
    for f = 1, #original, 2 do
      if original[f] == 'p' then redis.call('LPUSH', list, original[f + 1]) end
    end
    redis.call('XDEL', dlq, entry[1])
  end
  return #entries
end

for _, entry in ipairs(entries) do
  local fields = {}
  local original = entry[2]
  for f = 1, #original, 2 do
    local name = original[f]
    -- Keep the message (m, i, d, k); drop what dead-lettering added. On an
    -- ordered subscription it comes after the entries of its key already in
    -- the stream.
    if name == 'm' or name == 'i' or name == 'd' or name == 'k' then
      fields[#fields + 1] = name
      fields[#fields + 1] = original[f + 1]
    end
  end
  fields[#fields + 1] = 'o'
  fields[#fields + 1] = subscription
  redis.call('XADD', stream, '*', unpack(fields))
  redis.call('XDEL', dlq, entry[1])
end
if #entries > 0 then hint_watchers(KEYS[3], ARGV[3], ARGV[4], ARGV[5]) end
return #entries

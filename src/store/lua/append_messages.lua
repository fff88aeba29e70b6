-- Appends requests of messages that are neither scheduled nor deduplicated
-- one by one, in order, and counts them; a request may carry its own dedupe
-- id. One script, not a pipeline: a Redis Cluster client re-sends a pipeline
-- whole when it meets ASK during a slot migration, which would append its
-- first entries twice.
--
-- KEYS[1] stream, KEYS[2] topic settings HASH (its `published` counter),
-- KEYS[3] the topic's watchers HASH, KEYS[4..] the requests' dedupe keys
-- ARGV[1] dedupe window in ms, ARGV[2..4] who appends, the hints channel and
-- the hint for the other watchers (see hint_watchers), then per request: its message count, the
-- index of its dedupe key in KEYS (0: none), then per message the ordering
-- key ('' for none; the entry's `k` field) and the encoded message (its `m`
-- field)
-- Returns per request { 0, id, … } when appended, or { 1, claim } when its
-- dedupe key was taken: the first request's claim, ids joined by ',' (as
-- publish_messages.lua writes it, "<id>[ <due ms>]" per message), where
-- "<ms>-<seq>+<n>" stands for that id and the n after it in its millisecond.

local stream, window = KEYS[1], ARGV[1]

-- The claim of appended ids (reply[2..]): one script appends them back to
-- back, so a millisecond's ids are consecutive and a run of them is one
-- token; a request of 1,000 messages keeps a few dozen bytes, not 16 KB.
local function claim_of(reply)
  -- The common cases without the loop below, which took a seventh of a
  -- one-message append's instructions (BENCHMARKS.md): one id is its own
  -- claim; ids that only grow, n of them from a first to a last of one
  -- millisecond n - 1 apart, are one run.
  local count = #reply - 1
  if count <= 1 then return reply[2] or '' end
  local first_ms, first_seq = string.match(reply[2], '^(%d+)%-(%d+)$')
  local last_ms, last_seq = string.match(reply[#reply], '^(%d+)%-(%d+)$')
  if first_ms == last_ms and #last_seq < 14
    and tonumber(last_seq) - tonumber(first_seq) == count - 1 then
    return reply[2] .. '+' .. (count - 1)
  end
  local tokens, ms, first, last = {}, nil, nil, nil
  local function close_run()
    if ms == nil then return end
    local token = ms .. '-' .. first
    if last > first then token = token .. '+' .. (last - first) end
    tokens[#tokens + 1] = token
  end
  for k = 2, #reply do
    local id_ms, id_seq = string.match(reply[k], '^(%d+)%-(%d+)$')
    local seq = tonumber(id_seq)
    -- Lua prints numbers past 1e14 in exponent form: such ids stay whole.
    if seq < 1e13 and id_ms == ms and seq == last + 1 then
      last = seq
    else
      close_run()
      if seq < 1e13 then
        ms, first, last = id_ms, seq, seq
      else
        ms = nil
        tokens[#tokens + 1] = reply[k]
      end
    end
  end
  close_run()
  return table.concat(tokens, ',')
end
local replies = {}
local appended = 0
local i = 5
while i <= #ARGV do
  local count, dedupe = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  i = i + 2
  local claim = dedupe > 0 and redis.call('GET', KEYS[dedupe])
  if claim then
    replies[#replies + 1] = { 1, claim }
  else
    local reply = { 0 }
    for j = i, i + 2 * count - 1, 2 do
      if ARGV[j] == '' then
        reply[#reply + 1] = redis.call('XADD', stream, '*', 'm', ARGV[j + 1])
      else
        reply[#reply + 1] = redis.call('XADD', stream, '*', 'm', ARGV[j + 1], 'k', ARGV[j])
      end
    end
    if dedupe > 0 then
      redis.call('SET', KEYS[dedupe], claim_of(reply), 'PX', window)
    end
    appended = appended + count
    replies[#replies + 1] = reply
  end
  i = i + 2 * count
end
redis.call('HINCRBY', KEYS[2], 'published', appended)
if appended > 0 then hint_watchers(KEYS[3], ARGV[2], ARGV[3], ARGV[4]) end
return replies

-- Publishes a batch in which some messages are scheduled or carry a dedupe id
-- (plain batches are a pipeline of XADD). Per message, in order: the dedupe
-- check and claim, then XADD now, or ZADD + HSET when it is due later. One
-- script, so a crash never leaves a dedupe claim without its message.
--
-- KEYS[1] stream, KEYS[2] scheduled ZSET, KEYS[3] scheduled HASH, KEYS[4] topic
-- settings HASH (its `published` counter), KEYS[5..] dedupe keys
-- ARGV[1] dedupe window in ms, then per message six values: id to use if
--   scheduled, due kind ('n' now, 'a' at ms, 'd' after ms), amount, dedupe
--   key index in KEYS (0: none), the encoded message (the entry's `m` field),
--   its ordering key ('' for none; the entry's `k` field, kept in the
--   scheduled HASH as `<id>/k` until promotion)
-- Returns { now, { {id, duplicate (0/1), due ms (0 when unknown)}, ... } }; a
-- duplicate's due ms is the original's

local stream, scheduled, messages, settings = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local window = ARGV[1]
local now = now_ms()
local out = {}
local published = 0

-- A dedupe key holds the original's id, and for a scheduled message also its
-- due time as published: "<id> <due ms>". The due time of a duplicate is the
-- original's: its current one while it is scheduled (rescheduling moves it),
-- else the one it was published with, else the time in its entry id.
local function original_of(claim)
  local id, due = string.match(claim, '^(%S+) (%d+)$')
  if not id then id = claim end
  local current = redis.call('ZSCORE', scheduled, id)
  if current then return id, tonumber(current) end
  if due then return id, tonumber(due) end
  return id, tonumber(string.match(id, '^(%d+)%-%d+$')) or 0
end

for i = 2, #ARGV, 6 do
  local scheduled_id, kind, amount = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local dedupe, message, key = tonumber(ARGV[i + 3]), ARGV[i + 4], ARGV[i + 5]

  local claim = dedupe > 0 and redis.call('GET', KEYS[dedupe])
  if claim then
    local original, due = original_of(claim)
    out[#out + 1] = { original, 1, due }
  else
    local due = now
    if kind == 'a' then due = amount elseif kind == 'd' then due = now + amount end
    local id
    if due > now then
      id = scheduled_id
      redis.call('ZADD', scheduled, due, id)
      redis.call('HSET', messages, id, message)
      if key ~= '' then redis.call('HSET', messages, id .. '/k', key) end
    elseif key ~= '' then
      id = redis.call('XADD', stream, '*', 'm', message, 'k', key)
      due = now
    else
      id = redis.call('XADD', stream, '*', 'm', message)
      due = now
    end
    if dedupe > 0 then
      local claim = id
      if due > now then claim = id .. ' ' .. due end
      redis.call('SET', KEYS[dedupe], claim, 'PX', window)
    end
    out[#out + 1] = { id, 0, due }
    published = published + 1
  end
end
if published > 0 then redis.call('HINCRBY', settings, 'published', published) end
return { now, out }

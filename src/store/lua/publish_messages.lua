-- Publishes a batch in which some messages are scheduled or carry a dedupe id
-- (plain batches are a pipeline of XADD). Per message, in order: the dedupe
-- check and claim, then XADD now, or ZADD + HSET when it is due later. One
-- script, so a crash never leaves a dedupe claim without its message.
--
-- KEYS[1] stream, KEYS[2] scheduled ZSET, KEYS[3] scheduled HASH, KEYS[4] topic
-- settings HASH (its `published` counter), KEYS[5..] dedupe keys
-- ARGV[1] dedupe window in ms, then per message five values: id to use if
--   scheduled, due kind ('n' now, 'a' at ms, 'd' after ms), amount, dedupe
--   key index in KEYS (0: none), the encoded message (the entry's `m` field)
-- Returns { now, { {id, duplicate (0/1), due ms (0 when unknown)}, ... } }

local stream, scheduled, messages, settings = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local window = ARGV[1]
local now = now_ms()
local out = {}
local published = 0

for i = 2, #ARGV, 5 do
  local scheduled_id, kind, amount = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local dedupe, message = tonumber(ARGV[i + 3]), ARGV[i + 4]

  local original = dedupe > 0 and redis.call('GET', KEYS[dedupe])
  if original then
    out[#out + 1] = { original, 1, 0 }
  else
    local due = now
    if kind == 'a' then due = amount elseif kind == 'd' then due = now + amount end
    local id
    if due > now then
      id = scheduled_id
      redis.call('ZADD', scheduled, due, id)
      redis.call('HSET', messages, id, message)
    else
      id = redis.call('XADD', stream, '*', 'm', message)
      due = now
    end
    if dedupe > 0 then redis.call('SET', KEYS[dedupe], id, 'PX', window) end
    out[#out + 1] = { id, 0, due }
    published = published + 1
  end
end
if published > 0 then redis.call('HINCRBY', settings, 'published', published) end
return { now, out }

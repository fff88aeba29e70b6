-- Publishes to a LIST topic: the messages due now are pushed onto its list
-- (LPUSH, in request order: the first is the oldest, popped first from the
-- RPOP end), those due later go to the topic's schedule, holding the bare
-- payload (promote_due.lua pushes it when due). A list element is bytes
-- only: attributes, ordering keys and dedupe ids were refused before.
--
-- KEYS[1] the list, KEYS[2] scheduled ZSET, KEYS[3] scheduled HASH, KEYS[4]
-- topic settings HASH (its `published` counter)
-- ARGV records of four values: the message's id, due kind ('n' now, 'a' at
-- ms, 'd' after ms), amount, payload
-- Returns { now, { due ms, ... } } in request order.

local list, scheduled, messages = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
local pushed, out = {}, {}
for i = 1, #ARGV, 4 do
  local id, kind, amount, payload = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local due = now
  if kind == 'a' then due = amount elseif kind == 'd' then due = now + amount end
  if due > now then
    redis.call('ZADD', scheduled, due, id)
    redis.call('HSET', messages, id, payload)
  else
    pushed[#pushed + 1] = payload
  end
  out[#out + 1] = due
end
call_with('LPUSH', { list }, pushed)
redis.call('HINCRBY', KEYS[4], 'published', #out)
return { now, out }

-- Moves due scheduled messages into the stream: range by score with a limit,
-- XADD each, remove from the ZSET and HASH. Atomic, so replicas promoting at
-- the same time never duplicate or lose a message.
--
-- KEYS[1] scheduled ZSET, KEYS[2] scheduled HASH, KEYS[3] stream
-- ARGV[1] most messages to move
-- Returns { moved, ms until the next scheduled message is due or -1 }
-- The stream entry gets two more fields: i (message id), d (due time, ms).

local scheduled, messages, stream = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local ids = {}
for d = 1, #due, 2 do
  local id, at = due[d], due[d + 1]
  local packed = redis.call('HGET', messages, id)
  if packed then
    local fields = cmsgpack.unpack(packed)
    fields[#fields + 1] = 'i'
    fields[#fields + 1] = id
    fields[#fields + 1] = 'd'
    fields[#fields + 1] = at
    redis.call('XADD', stream, '*', unpack(fields))
  end
  ids[#ids + 1] = id
end
if #ids > 0 then
  redis.call('ZREM', scheduled, unpack(ids))
  redis.call('HDEL', messages, unpack(ids))
end
local wait = -1
local head = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
if head[1] then wait = math.max(0, tonumber(head[2]) - now) end
return { #ids, wait }

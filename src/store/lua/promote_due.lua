-- Moves due scheduled messages (or, with ARGV[2] > 0, those due within that
-- many ms) into the stream: range by score with a limit,
-- XADD each, remove from the ZSET and HASH. Atomic, so replicas promoting at
-- the same time never duplicate or lose a message.
--
-- KEYS[1] scheduled ZSET, KEYS[2] scheduled HASH, KEYS[3] stream, KEYS[4]
-- the topic's watchers HASH
-- ARGV[1] most messages to move, ARGV[2] how far ahead of their due time
-- messages are moved, in ms (subscribers hold them until due), ARGV[3..5]
-- who promotes, the hints channel and the hint (see hint_watchers)
-- Returns { moved, ms until the next scheduled message is to be moved, or -1 }
-- The stream entry is m (the message as stored), i (message id), d (due
-- time, ms) and, when it has one, k (its ordering key, kept as `<id>/k`).

local scheduled, messages, stream = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
local ahead = tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now + ahead, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local ids = {}
for d = 1, #due, 2 do ids[#ids + 1] = due[d] end
if #ids > 0 then
  local key_fields = {}
  for n, id in ipairs(ids) do key_fields[n] = id .. '/k' end
  local bodies = redis.call('HMGET', messages, unpack(ids))
  local keys = redis.call('HMGET', messages, unpack(key_fields))
  for n, id in ipairs(ids) do
    if bodies[n] and keys[n] then
      redis.call('XADD', stream, '*', 'm', bodies[n], 'i', id, 'd', due[2 * n], 'k', keys[n])
    elseif bodies[n] then
      redis.call('XADD', stream, '*', 'm', bodies[n], 'i', id, 'd', due[2 * n])
    end
  end
  redis.call('ZREM', scheduled, unpack(ids))
  redis.call('HDEL', messages, unpack(ids))
  redis.call('HDEL', messages, unpack(key_fields))
  hint_watchers(KEYS[4], ARGV[3], ARGV[4], ARGV[5])
end
local wait = -1
local head = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
if head[1] then wait = math.max(0, tonumber(head[2]) - ahead - now) end
return { #ids, wait }

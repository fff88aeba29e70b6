-- Moves due scheduled messages (or, with ARGV[2] > 0, those due within that
-- many ms) into the stream: range by score with a limit,
-- XADD each, remove from the ZSET and HASH. Atomic, so replicas promoting at
-- the same time never duplicate or lose a message.
--
-- An EPHEMERAL topic (`kind` in its settings HASH) has no stream: its
-- messages are published to its channel when due, never ahead, as
-- publish_messages.lua publishes them.
--
-- KEYS[1] scheduled ZSET, KEYS[2] scheduled HASH, KEYS[3] stream, KEYS[4]
-- the topic's watchers HASH, KEYS[5] the topic's settings HASH (its kind)
-- ARGV[1] most messages to move, ARGV[2] how far ahead of their due time
-- messages are moved, in ms (subscribers hold them until due), ARGV[3..5]
-- who promotes, the hints channel and the hint (see hint_watchers), ARGV[6]
-- the topic's channel, if it is EPHEMERAL
-- Returns { moved, ms until the next scheduled message is to be moved, or -1 }
-- The stream entry is m (the message as stored), i (message id), d (due
-- time, ms) and, when it has one, k (its ordering key, kept as `<id>/k`).

local scheduled, messages, stream = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
local config = redis.call('HMGET', KEYS[5], 'kind', 'list_key')
local kind = config[1]

-- LIST topics: a due message's payload (the HASH holds it bare, see
-- push_elements.lua) is pushed onto the topic's list, earliest due first,
-- never ahead of time: a list has no consumer to hold it until due. The
-- list key comes from the settings, not KEYS: LIST topics are refused on a
-- cluster, where that would matter. Its consumers learn of it by their
-- blocking moves, not by a hint.
if kind == 'list' then
  local list = config[2]
  local ids = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
  if #ids > 0 then
    local payloads = redis.call('HMGET', messages, unpack(ids))
    local pushed = {}
    for n = 1, #ids do
      if payloads[n] then pushed[#pushed + 1] = payloads[n] end
    end
    call_with('LPUSH', { list }, pushed)
    redis.call('ZREM', scheduled, unpack(ids))
    redis.call('HDEL', messages, unpack(ids))
  end
  local wait = -1
  local head = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
  if head[1] then wait = math.max(0, tonumber(head[2]) - now) end
  return { #ids, wait }
end

local ahead = tonumber(ARGV[2])
if kind == 'ephemeral' then ahead = 0 end
local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now + ahead, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local ids = {}
for d = 1, #due, 2 do ids[#ids + 1] = due[d] end
if #ids > 0 then
  local key_fields = {}
  for n, id in ipairs(ids) do key_fields[n] = id .. '/k' end
  local bodies = redis.call('HMGET', messages, unpack(ids))
  local keys = redis.call('HMGET', messages, unpack(key_fields))
  for n, id in ipairs(ids) do
    if kind == 'ephemeral' then
      if bodies[n] then redis.call('PUBLISH', ARGV[6], id .. ' ' .. now .. ' ' .. bodies[n]) end
    elseif bodies[n] and keys[n] then
      redis.call('XADD', stream, '*', 'm', bodies[n], 'i', id, 'd', due[2 * n], 'k', keys[n])
    elseif bodies[n] then
      redis.call('XADD', stream, '*', 'm', bodies[n], 'i', id, 'd', due[2 * n])
    end
  end
  redis.call('ZREM', scheduled, unpack(ids))
  redis.call('HDEL', messages, unpack(ids))
  redis.call('HDEL', messages, unpack(key_fields))
  if kind ~= 'ephemeral' then hint_watchers(KEYS[4], ARGV[3], ARGV[4], ARGV[5]) end
end
local wait = -1
local head = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
if head[1] then wait = math.max(0, tonumber(head[2]) - ahead - now) end
return { #ids, wait }

-- Hands a consumer its next deliveries: expired leases first (redelivery),
-- then new entries, never more than the consumer's room allows, and records
-- a lease for each one. Atomic, so two consumers never get one entry at once.
--
-- KEYS[1] stream, KEYS[2] leases ZSET of the subscription (id -> deadline ms)
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] max outstanding for this consumer,
-- ARGV[4] most deliveries to return, ARGV[5] lease length in ms
-- Returns { wait_ms, { {id, delivery_count, {field, value, ...}}, ... } }
--   wait_ms: ms until the next lease this consumer could act on expires, -1 if none.

local stream, leases = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
local max_outstanding = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local lease_ms = tonumber(ARGV[5])

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local deadline = now + lease_ms
local out = {}

-- Moves one pending entry to this consumer under a fresh lease.
local function claim(id, count)
  local claimed = redis.call('XCLAIM', stream, group, consumer, 0, id)
  if #claimed == 0 or not claimed[1] then
    -- The entry left the stream; drop what is left of its delivery.
    redis.call('XACK', stream, group, id)
    redis.call('ZREM', leases, id)
    return false
  end
  redis.call('ZADD', leases, deadline, id)
  out[#out + 1] = { id, tonumber(count) + 1, claimed[1][2] }
  return true
end

local owned = 0
local summary = redis.call('XPENDING', stream, group)
if summary[4] then
  for _, pair in ipairs(summary[4]) do
    if pair[1] == consumer then
      owned = tonumber(pair[2])
      break
    end
  end
end
local room = max_outstanding - owned

if room <= 0 then
  -- Full: only this consumer's own expired deliveries may go out again, and
  -- only its own leases tell when to look next.
  local wait = -1
  local mine = redis.call('XPENDING', stream, group, '-', '+', owned, consumer)
  for _, entry in ipairs(mine) do
    local score = redis.call('ZSCORE', leases, entry[1])
    local left = score and (tonumber(score) - now) or 0
    if left <= 0 and #out < limit and claim(entry[1], entry[4]) then
      left = lease_ms
    end
    if left > 0 and (wait < 0 or left < wait) then wait = left end
    if left <= 0 then wait = 0 end
  end
  return { wait, out }
end

-- Redeliver expired leases of any consumer, while there is room.
-- Taking back one's own expired delivery costs no room.
local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  if #out >= limit then break end
  local pending = redis.call('XPENDING', stream, group, id, id, 1)
  if #pending == 0 then
    redis.call('ZREM', leases, id) -- acked meanwhile: the lease is stale
  else
    local mine = pending[1][2] == consumer
    if (mine or room > 0) and claim(id, pending[1][4]) and not mine then
      room = room - 1
    end
  end
end

if room > 0 and #out < limit then
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer,
    'COUNT', math.min(room, limit - #out), 'STREAMS', stream, '>')
  if read then
    for _, entry in ipairs(read[1][2]) do
      redis.call('ZADD', leases, deadline, entry[1])
      out[#out + 1] = { entry[1], 1, entry[2] }
    end
  end
end

local wait = -1
local head = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
if head[1] then wait = math.max(0, tonumber(head[2]) - now) end
return { wait, out }

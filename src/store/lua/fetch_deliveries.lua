-- Hands a consumer its next deliveries, within its room, and records a lease
-- for each. First it settles what is due in the subscription's timers: ended
-- leases are parked for their retry backoff (or dead-lettered after the last
-- attempt), parked entries whose time has come are delivered; then new
-- entries. Atomic, so two consumers never hold one entry at once.
--
-- KEYS[1] stream, KEYS[2] timers ZSET, KEYS[3] subscription settings HASH, KEYS[4] dead letters STREAM
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] max outstanding for this consumer,
-- ARGV[4] most deliveries (and due timers) to handle, ARGV[5] lease length in ms
-- Returns { wait_ms, { {id, delivery_count, {field, value, ...}}, ... } }
--   wait_ms: ms until the next timer this consumer could act on, -1 if none.

local stream, timers, settings, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, consumer = ARGV[1], ARGV[2]
local max_outstanding = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local lease_ms = tonumber(ARGV[5])

local now = now_ms()
local deadline = now + lease_ms
local out = {}

local function owned()
  local summary = redis.call('XPENDING', stream, group)
  for _, pair in ipairs(summary[4] or {}) do
    if pair[1] == consumer then return tonumber(pair[2]) end
  end
  return 0
end

-- This consumer's own leases: the ended ones are settled, and the earliest
-- remaining deadline is returned (-1 if none).
local function settle_own_leases()
  local wait = -1
  local mine = redis.call('XPENDING', stream, group, '-', '+', max_outstanding, consumer)
  for _, entry in ipairs(mine) do
    local score = redis.call('ZSCORE', timers, entry[1])
    local left = score and (tonumber(score) - now) or 0
    if left <= 0 then
      end_lease(stream, timers, dlq, group, settings, entry[1], tonumber(entry[4]), now, -1, 'deadline_exceeded')
      left = 0
    end
    if wait < 0 or left < wait then wait = left end
  end
  return wait
end

local room = max_outstanding - owned()
if room <= 0 then
  -- Full: only this consumer's own ended leases can make room.
  settle_own_leases()
  room = max_outstanding - owned()
  if room <= 0 then return { settle_own_leases(), out } end
end

local due = redis.call('ZRANGEBYSCORE', timers, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(due) do
  local pending = redis.call('XPENDING', stream, group, id, id, 1)[1]
  if not pending then
    redis.call('ZREM', timers, id) -- acked meanwhile
  else
    local owner, count = pending[2], tonumber(pending[4])
    if owner ~= PARKED then
      local wait = end_lease(stream, timers, dlq, group, settings, id, count, now, -1, 'deadline_exceeded')
      if owner == consumer then room = room + 1 end
      if wait == 0 then owner = PARKED end
    end
    if owner == PARKED and room > 0 and #out < limit then
      local claimed = redis.call('XCLAIM', stream, group, consumer, 0, id)[1]
      if claimed then
        redis.call('ZADD', timers, deadline, id)
        out[#out + 1] = { id, count + 1, claimed[2] }
        room = room - 1
      else
        -- The entry left the stream; drop what is left of its delivery.
        redis.call('XACK', stream, group, id)
        redis.call('ZREM', timers, id)
      end
    end
  end
end

if room > 0 and #out < limit then
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer,
    'COUNT', math.min(room, limit - #out), 'STREAMS', stream, '>')
  if read then
    -- One ZADD for the whole batch: far cheaper than one call per entry.
    local leases = {}
    for _, entry in ipairs(read[1][2]) do
      leases[#leases + 1] = deadline
      leases[#leases + 1] = entry[1]
      out[#out + 1] = { entry[1], 1, entry[2] }
      room = room - 1
    end
    if #leases > 0 then redis.call('ZADD', timers, unpack(leases)) end
  end
end

if room <= 0 then return { settle_own_leases(), out } end
local wait = -1
local head = redis.call('ZRANGE', timers, 0, 0, 'WITHSCORES')
if head[1] then wait = math.max(0, tonumber(head[2]) - now) end
return { wait, out }

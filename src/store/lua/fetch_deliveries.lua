-- Hands a consumer its next deliveries, within its room, and records their
-- leases. First it settles what is due in the subscription's timers: ended
-- leases are parked for their retry backoff (or dead-lettered after the last
-- attempt), parked entries whose time has come are delivered; then new
-- entries. Atomic, so two consumers never hold one entry at once.
--
-- Timers are of two kinds. A redelivered or extended entry has its own,
-- member = entry id. A batch of new entries shares one, member =
-- 'b/<consumer>/<first id>/<last id>': one ZADD per fetch instead of one per
-- entry. A batch timer covers the entries of its range that its consumer
-- still holds at delivery count 1 and that have no timer of their own.
--
-- On an ordered subscription, a new entry with an ordering key is delivered
-- only when it takes its key; else it is blocked behind the key's holder
-- (lib.lua), using up none of the consumer's room, and the read goes on. At
-- the subscription's cap of blocked entries (`mblk`), no new entries are read.
--
-- On a LIST topic, new entries are the list's elements, moved into the
-- stream as this consumer takes them (read_new).
--
-- KEYS the subscription's lease keys (TopicKeys::lease_keys)
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] max outstanding for this consumer,
-- ARGV[4] most deliveries (and ended leases) to handle, ARGV[5] lease length in ms,
-- ARGV[6] most bytes of messages to hand out (one message may go past it),
-- ARGV[7] the most bytes one message can have, ARGV[8] 1 when the
-- subscription is ordered (fixed at its creation), else 0, ARGV[9] most bytes
-- of messages this consumer may hold unacked, 0 for no limit (one message
-- may go past it); then, optionally, acks that ride on this fetch
-- (handoff.rs), applied first: ARGV[10] what to return of them ('n': the
-- count, 'i': the ids), ARGV[11] on the deliveries as ack.lua takes them
-- Returns { wait_ms, { {id, delivery_count, {field, value, ...}}, ... }, room, now, dead, more, handed, acks, batch }
--   wait_ms: ms until the next timer this consumer could act on, -1 if none;
--   room: deliveries this consumer may still take; now: Redis' clock in ms;
--   dead: entries this call dead-lettered; more: 1 when ARGV[6], or the most
--   new entries one call reads, stopped it (more may be waiting); handed:
--   ordering keys this call handed to their next entry (acks included);
--   acks: as ack.lua returns them, {} without acks; batch: the first and
--   last id of the batch timer this call set and how many deliveries it
--   covers, the last ones of the list; {} when it set none.

local stream, timers, settings, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, consumer = ARGV[1], ARGV[2]
local max_outstanding = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local lease_ms = tonumber(ARGV[5])
local max_bytes = tonumber(ARGV[6])
local max_entry = math.max(1, tonumber(ARGV[7]))
local max_unacked_bytes = tonumber(ARGV[9])

local now = now_ms()
local deadline = now + lease_ms
local o = ordering(group, now, ARGV[8] == '1')
local out = {}
local ended = 0 -- leases ended by this call, bounded by `limit`
local dead = 0  -- of which dead-lettered
local room = 0  -- deliveries this consumer may still take
local bytes = 0 -- of the messages handed out

local function size_of(fields)
  local n = 0
  for f = 1, #fields do n = n + #fields[f] end
  return n
end

-- Deliveries the subscription's limits allow this call (its token bucket,
-- its cap on leased messages); set below.
local allowed = math.huge

local function full()
  return room <= 0 or #out >= limit or #out >= allowed or bytes >= max_bytes
end

-- Redriven dead letters are for one subscription only (field `o`).
local function meant_for_others(fields)
  for f = 1, #fields, 2 do
    if fields[f] == 'o' then return fields[f + 1] ~= group end
  end
  return false
end

-- Entries this consumer holds, and entries leased by any consumer (those
-- parked for a retry are not leased).
local function owned_and_leased()
  local summary = redis.call('XPENDING', stream, group)
  local own, parked = 0, 0
  for _, pair in ipairs(summary[4] or {}) do
    if pair[1] == consumer then own = tonumber(pair[2]) end
    if pair[1] == PARKED then parked = tonumber(pair[2]) end
  end
  return own, tonumber(summary[1]) - parked
end

local function end_expired(id, count)
  ended = ended + 1
  local wait = end_lease(o, dlq, id, count, -1, 'deadline_exceeded')
  if wait < 0 then dead = dead + 1 end
  return wait
end

-- Hands this consumer a parked entry whose time has come, if it has room.
local function claim_parked(id, count)
  if full() then return end
  local claimed = redis.call('XCLAIM', stream, group, consumer, 0, id)[1]
  if claimed then
    redis.call('ZADD', timers, deadline, id)
    out[#out + 1] = { id, count + 1, claimed[2] }
    room = room - 1
    bytes = bytes + size_of(claimed[2])
  else
    -- The entry left the stream; drop what is left of its delivery.
    redis.call('XACK', stream, group, id)
    redis.call('ZREM', timers, id)
    release(o, { id })
  end
end

-- Ends the leases a due batch timer still covers (those retried at once are
-- redelivered now); true when all are done.
local function settle_batch(member, holder, first, last)
  local held = redis.call('XPENDING', stream, group, first, last, limit, holder)
  for _, entry in ipairs(held) do
    if ended >= limit then return false end
    local id, count = entry[1], tonumber(entry[4])
    if count == 1 and not redis.call('ZSCORE', timers, id) then
      local wait = end_expired(id, count)
      if holder == consumer then room = room + 1 end
      if wait == 0 then claim_parked(id, count) end
    end
  end
  return true
end

-- Up to `count` new entries for this consumer. On a LIST topic, when the
-- stream has fewer, the rest come from its list: first what blocking moves
-- left in the staging list, then the list's oldest elements (the RPOP end:
-- producers LPUSH), each appended as an entry `p` and read at once. Only
-- what a consumer takes leaves the list, so its length stays the lag.
-- Once this call found no more undelivered entries in the stream, or no
-- more elements in the staging list, it does not look there again: nothing
-- else writes to them while it runs.
local stream_read, staging_read = false, false
local function read_new(count)
  local entries = {}
  if not stream_read then
    local read = redis.call('XREADGROUP', 'GROUP', group, consumer,
      'COUNT', count, 'STREAMS', stream, '>')
    entries = read and read[1][2] or {}
  end
  local wanted = count - #entries
  if not o.list or wanted <= 0 then return entries end
  stream_read = true
  local elements = {}
  if not staging_read then
    elements = redis.call('RPOP', o.staging, wanted) or {}
    staging_read = #elements < wanted
  end
  if #elements < wanted then
    for _, element in ipairs(redis.call('RPOP', o.list, wanted - #elements) or {}) do
      elements[#elements + 1] = element
    end
  end
  if #elements == 0 then return entries end
  for _, element in ipairs(elements) do redis.call('XADD', stream, '*', 'p', element) end
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer,
    'COUNT', #elements, 'STREAMS', stream, '>')
  for _, entry in ipairs(read and read[1][2] or {}) do entries[#entries + 1] = entry end
  return entries
end

-- Riding acks first: the room they free is taken at once.
local acks = {}
if ARGV[10] then
  local acked, leases = ack_held(o, 11)
  local ordered = o.on()
  acks = { acked, (ARGV[10] == 'i' or ordered) and leases or {}, ordered and 1 or 0, o.handed }
end

-- A full consumer still settles due timers: its own ended leases make room.
local held, leased = owned_and_leased()
room = max_outstanding - held

-- The subscription's limits, across all its streams and replicas. The token
-- bucket (`tok` tokens at `tts`) refills at `rate` per second up to `burst`;
-- it is written back only when this call takes tokens (the refill of a call
-- that takes none comes out the same when counted later).
local limits = redis.call('HMGET', settings, 'rate', 'burst', 'mout', 'tok', 'tts', 'msz')
local rate, max_leased = tonumber(limits[1]) or 0, tonumber(limits[3]) or 0
local tokens, capacity
if rate > 0 then
  capacity = tonumber(limits[2]) or 0
  if capacity <= 0 then capacity = math.ceil(rate) end
  tokens = math.min(capacity,
    (tonumber(limits[4]) or capacity) + math.max(0, now - (tonumber(limits[5]) or now)) * rate / 1000)
  allowed = math.floor(tokens)
end
if max_leased > 0 then allowed = math.min(allowed, math.max(0, max_leased - leased)) end

-- A limit on the bytes the consumer holds: this fetch hands out no more than
-- the limit less the sizes of the consumer's pending entries. They are
-- summed only when that many entries of the largest size such fetches have
-- handed out (`msz`; else of the largest size a message can have) could make
-- the limit bind: with small messages, never. At the limit the consumer has
-- no room, and waits for an ack as a consumer at its count does.
local largest_out = tonumber(limits[6]) or 0
if max_unacked_bytes > 0 and room > 0 then
  local held_bytes = 0
  local largest = largest_out > 0 and math.min(largest_out, max_entry) or max_entry
  if held > 0 and max_unacked_bytes - held * largest < max_bytes then
    local pending = redis.call('XPENDING', stream, group, '-', '+', held, consumer)
    local mine = {}
    for _, entry in ipairs(pending) do mine[entry[1]] = true end
    -- Mostly the consumer's entries lie close together: one read of their
    -- span, unless other consumers' entries make it much longer.
    local first, last = pending[1][1], pending[#pending][1]
    local span = redis.call('XRANGE', stream, first, last, 'COUNT', 4 * #pending)
    if #span < 4 * #pending or span[#span][1] == last then
      for _, entry in ipairs(span) do
        if mine[entry[1]] then held_bytes = held_bytes + size_of(entry[2]) end
      end
    else
      for _, entry in ipairs(pending) do
        local found = redis.call('XRANGE', stream, entry[1], entry[1])[1]
        if found then held_bytes = held_bytes + size_of(found[2]) end
      end
    end
  end
  if held_bytes >= max_unacked_bytes then
    room = 0
  else
    max_bytes = math.min(max_bytes, max_unacked_bytes - held_bytes)
  end
end

-- The earliest timer first: mostly none is due, and then it alone gives the
-- wait at the end.
local due, next_at = {}, nil
local earliest = redis.call('ZRANGE', timers, 0, 0, 'WITHSCORES')
if earliest[1] then
  if tonumber(earliest[2]) > now then
    next_at = tonumber(earliest[2])
  else
    due = redis.call('ZRANGEBYSCORE', timers, '-inf', now, 'LIMIT', 0, limit)
  end
end
-- Timers this call sets when none was due are all at `deadline`.
local timer_set = false

for _, member in ipairs(due) do
  if ended >= limit and #out >= limit then break end
  local holder, first, last = string.match(member, '^b/(.+)/([%d%-]+)/([%d%-]+)$')
  if holder then
    if settle_batch(member, holder, first, last) then redis.call('ZREM', timers, member) end
  else
    local id = member
    local pending = redis.call('XPENDING', stream, group, id, id, 1)[1]
    if not pending then
      redis.call('ZREM', timers, id) -- acked meanwhile
      release(o, { id })
    else
      local owner, count = pending[2], tonumber(pending[4])
      if owner ~= PARKED then
        if ended >= limit then break end
        local wait = end_expired(id, count)
        if owner == consumer then room = room + 1 end
        if wait == 0 then owner = PARKED end
      end
      if owner == PARKED then claim_parked(id, count) end
    end
  end
end

-- New entries, in reads no larger than the bytes left could hold at the
-- largest message size: an entry read is delivered (or blocked), it cannot
-- be put back. One batch timer covers all the reads. Blocked entries take no
-- room, so the reads are bounded by `limit` entries in all as well.
-- Entries that took their key while waiting, before new ones.
while o.on() and not full() do
  local fits = math.max(1, math.floor((max_bytes - bytes) / max_entry))
  local got, taken = take_ready(o, consumer, math.min(room, limit - #out, allowed - #out, fits), deadline)
  if taken == 0 then break end
  timer_set = true
  for _, d in ipairs(got) do
    out[#out + 1] = d
    room = room - 1
    bytes = bytes + size_of(d[3])
  end
end

local first_new, last_new
local batched = 0 -- deliveries the batch timer covers
local examined = 0
local more = bytes >= max_bytes
local blocked = o.on() and redis.call('ZCARD', o.blocked) or 0
while not full() and not (o.on() and blocked >= o.max_blocked) do
  local count = math.min(room, limit - #out, limit - examined, allowed - #out,
    math.max(1, math.floor((max_bytes - bytes) / max_entry)))
  if count <= 0 then more = true break end
  local entries = read_new(count)
  examined = examined + #entries
  local keyed, key_of = {}, {}
  if o.on() then
    for _, entry in ipairs(entries) do
      local key = ordering_key_of(entry[2])
      if key and not meant_for_others(entry[2]) then
        keyed[#keyed + 1] = { entry[1], key }
        key_of[entry[1]] = key
      end
    end
  end
  local taken = {}
  if #keyed > 0 then
    local waiting
    taken, waiting = take_keys(o, keyed)
    blocked = blocked + waiting
  end
  for _, entry in ipairs(entries) do
    local id, fields = entry[1], entry[2]
    if meant_for_others(fields) then
      redis.call('XACK', stream, group, id)
    elseif key_of[id] and not taken[id] then
      -- blocked behind its key's holder
    else
      out[#out + 1] = { id, 1, fields }
      batched = batched + 1
      room = room - 1
      bytes = bytes + size_of(fields)
    end
  end
  if #entries > 0 then
    first_new = first_new or entries[1][1]
    last_new = entries[#entries][1]
  end
  if #entries < count then break end
end
local batch = {}
if first_new then
  redis.call('ZADD', timers, deadline, 'b/' .. consumer .. '/' .. first_new .. '/' .. last_new)
  timer_set = true
  batch = { first_new, last_new, batched }
end

-- Wait until the next timer in the future. Due timers left behind are
-- either beyond this call's limit (come back at once) or parked entries
-- waiting for room, which an ack brings, not the clock.
local wait = -1
if ended >= limit then
  wait = 0
elseif #due == 0 then
  -- Nothing settled: the timers are those read above, and this call's.
  local at = next_at
  if timer_set and (at == nil or deadline < at) then at = deadline end
  if at then wait = at - now end
else
  local next = redis.call('ZRANGEBYSCORE', timers, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if next[1] then wait = tonumber(next[2]) - now end
end
if bytes >= max_bytes then more = true end
if max_unacked_bytes > 0 then
  local largest = largest_out
  for _, d in ipairs(out) do largest = math.max(largest, size_of(d[3])) end
  if largest > largest_out then redis.call('HSET', settings, 'msz', largest) end
end
if tokens then
  local bucket_stopped = #out >= math.floor(tokens)
  if #out > 0 then
    tokens = tokens - #out
    redis.call('HSET', settings, 'tok', tostring(tokens), 'tts', now)
  end
  if bucket_stopped and room > 0 then
    -- Held back by the bucket: come back when the next token is in, and
    -- say so in the subscription's stats (`rlim`: when it last held back).
    local next_token = math.ceil((1 - tokens) * 1000 / rate)
    if wait < 0 or next_token < wait then wait = next_token end
    redis.call('HSET', settings, 'rlim', now)
    more = false
  end
end
return { wait, out, math.max(room, 0), now, dead, more and 1 or 0, o.handed, acks, batch }

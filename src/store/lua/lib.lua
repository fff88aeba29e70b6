-- Helpers shared by the scripts, prepended to each of them (see scripts.rs).

-- Redis' clock in ms: the one clock every replica agrees on.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- After entries were appended to a topic: hints the replicas among its
-- watchers (HASH: replica -> until when, Redis ms) other than `me` ('' for
-- none), with one PUBLISH; forgets the ones whose place ran out (they died,
-- or lost Redis). A topic watched by one replica costs one HGETALL.
local function hint_watchers(watchers, me, channel, hint)
  local list = redis.call('HGETALL', watchers)
  if #list == 0 or (#list == 2 and list[1] == me) then return end
  local now, hinted = now_ms(), false
  for i = 1, #list, 2 do
    if tonumber(list[i + 1]) < now then
      redis.call('HDEL', watchers, list[i])
    elseif list[i] ~= me and not hinted then
      redis.call('PUBLISH', channel, hint)
      hinted = true
    end
  end
end

-- The consumer that holds parked entries (nacked with a delay, or waiting out
-- a retry backoff), so that they use up no real consumer's room.
local PARKED = 'redq.parked'

-- Fails with NOGROUP when the subscription (or its topic) does not exist,
-- as XPENDING would: XACK answers 0 there, which would pass for "acked".
local function require_group(stream, group)
  redis.call('XPENDING', stream, group, '-', '+', 0)
end

-- Calls `fn(...)` with the values of `list` in chunks: `unpack` of a
-- client-sized list fails past about 8,000 values ("too many results to unpack").
local UNPACK_CHUNK = 1000
local function in_chunks(list, fn)
  for first = 1, #list, UNPACK_CHUNK do
    fn(unpack(list, first, math.min(first + UNPACK_CHUNK - 1, #list)))
  end
end

-- Deletes entries a LIST topic's subscription is done with (acked or
-- dead-lettered) from its stream; other kinds keep them for retention.
local function forget(o, ids)
  if o.list then in_chunks(ids, function(...) redis.call('XDEL', o.stream, ...) end) end
end

-- Whether `consumer` still holds the delivery of entry `id` it was handed at
-- delivery count `count`: otherwise it was acked, nacked or redelivered since.
local function holds(stream, group, id, consumer, count)
  local pending = redis.call('XPENDING', stream, group, id, id, 1)[1]
  return pending ~= nil and pending[2] == consumer and tonumber(pending[4]) == count
end

-- A subscription's retry settings: backoff min and max (ms), max delivery
-- attempts, and whether messages out of attempts are kept as dead letters.
local function retry_settings(key)
  local s = redis.call('HMGET', key, 'bmin', 'bmax', 'max', 'dlq')
  return tonumber(s[1]) or 1000, tonumber(s[2]) or 600000, tonumber(s[3]) or 0, s[4] ~= '0'
end

-- Wait before the next delivery after `attempt` failed: bmin * 2^(attempt-1), capped at bmax.
local function backoff(bmin, bmax, attempt)
  local wait = bmin * 2 ^ math.min(attempt - 1, 62)
  if wait > bmax then wait = bmax end
  return math.floor(wait)
end

-- Parks a pending entry until `due`: JUSTID keeps its delivery count.
local function park(stream, timers, group, id, due)
  redis.call('XCLAIM', stream, group, PARKED, 0, id, 'JUSTID')
  redis.call('ZADD', timers, due, id)
end

-- Ordered delivery. On a subscription whose settings have `ord` = 1, an
-- entry with an ordering key (its field `k`) is delivered only while it
-- holds its key. The first entry read of a key takes it; later ones wait in
-- the blocked ZSET, pending under BLOCKED, so that they use up no consumer's
-- room. The holder keeps its key through leases, nacks and retries;
-- `release`, called by every path that ends a holder's delivery for good,
-- hands the key to its next blocked entry, which waits in the ready ZSET
-- (still pending under BLOCKED) until a fetch with room takes it.
local BLOCKED = 'redq.blocked'

-- The ordering state of a subscription, for the scripts called with its
-- lease keys (TopicKeys::lease_keys). Whether it is ordered is read when
-- first asked (unless the caller knows: `ordered` true or false), so that
-- unordered work pays nothing. On a LIST topic the lease keys end with its
-- list and staging list (`o.list`, `o.staging`): its stream holds only what
-- redq took from the list and still holds, so an entry acked or
-- dead-lettered is deleted from it (forget).
local function ordering(group, now, ordered)
  local o = { stream = KEYS[1], timers = KEYS[2], settings = KEYS[3],
    holders = KEYS[5], held = KEYS[6], blocked = KEYS[7], ready = KEYS[8],
    list = KEYS[9], staging = KEYS[10],
    group = group, now = now, handed = 0 }
  local on
  if ordered == false then on = false end
  function o.on()
    if on == nil then
      local s = redis.call('HMGET', o.settings, 'ord', 'mblk')
      on = s[1] == '1'
      o.max_blocked = tonumber(s[2]) or 100000
    end
    return on
  end
  return o
end

-- An entry's ordering key; nil when it has none.
local function ordering_key_of(fields)
  for f = 1, #fields, 2 do
    if fields[f] == 'k' then return fields[f + 1] end
  end
  return nil
end

-- Blocked entries are ZSET members `<key length>:<key> <ms>-<seq>`, both
-- numbers padded to 20 digits: one key's members sort together, in stream
-- order, and no key's prefix is another's.
local function blocked_prefix(key)
  return #key .. ':' .. key .. ' '
end

local function pad(digits)
  return string.rep('0', 20 - #digits) .. digits
end

local function blocked_member(key, id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  return blocked_prefix(key) .. pad(ms) .. '-' .. pad(seq)
end

local function blocked_entry_id(member, prefix_length)
  local ms, seq = string.match(string.sub(member, prefix_length + 1), '^(%d+)%-(%d+)$')
  return string.gsub(ms, '^0+(%d)', '%1') .. '-' .. string.gsub(seq, '^0+(%d)', '%1')
end

-- Calls redis.call(command, fixed..., list...) in chunks of `list`, with
-- `after` (optional) at the end of each call: `unpack` in the middle of an
-- argument list gives only its first value.
local function call_with(command, fixed, list, after)
  for first = 1, #list, UNPACK_CHUNK do
    local args = {}
    for _, v in ipairs(fixed) do args[#args + 1] = v end
    for i = first, math.min(first + UNPACK_CHUNK - 1, #list) do args[#args + 1] = list[i] end
    for _, v in ipairs(after or {}) do args[#args + 1] = v end
    redis.call(command, unpack(args))
  end
end

-- Entries just read for a consumer, { {id, key}, ... } in stream order: the
-- first of a free key takes it, the others wait blocked, as attempt 0.
-- Returns the set of ids that took their key (deliver them) and how many
-- were blocked. At most a fetch's read (500 entries) at once.
local function take_keys(o, batch)
  local keys, first_of = {}, {}
  for _, e in ipairs(batch) do
    if not first_of[e[2]] then
      first_of[e[2]] = e[1]
      keys[#keys + 1] = e[2]
    end
  end
  local current = redis.call('HMGET', o.holders, unpack(keys))
  local holder_pairs, held_pairs, taken = {}, {}, {}
  for i, key in ipairs(keys) do
    if not current[i] then
      local id = first_of[key]
      taken[id] = true
      holder_pairs[#holder_pairs + 1] = key
      holder_pairs[#holder_pairs + 1] = id
      held_pairs[#held_pairs + 1] = id
      held_pairs[#held_pairs + 1] = key
    end
  end
  local waiting, members = {}, {}
  for _, e in ipairs(batch) do
    if not taken[e[1]] then
      waiting[#waiting + 1] = e[1]
      members[#members + 1] = 0
      members[#members + 1] = blocked_member(e[2], e[1])
    end
  end
  if #holder_pairs > 0 then
    call_with('HSET', { o.holders }, holder_pairs)
    call_with('HSET', { o.held }, held_pairs)
  end
  if #waiting > 0 then
    call_with('XCLAIM', { o.stream, o.group, BLOCKED, 0 }, waiting, { 'RETRYCOUNT', 0, 'JUSTID' })
    call_with('ZADD', { o.blocked }, members)
  end
  return taken, #waiting
end

-- Entries `ids` no longer hold their keys (acked, dead-lettered, gone from
-- the stream): each key goes to its next blocked entry, which waits in the
-- ready ZSET for any consumer with room (the XCLAIM that delivers it makes
-- it attempt 1); a key with none is free. Ids that hold no key are left
-- alone. Adds the keys handed on to `o.handed`.
local function release(o, ids)
  if #ids == 0 or not o.on() then return end
  o.now = o.now or now_ms()
  in_chunks(ids, function(...)
    local chunk = { ... }
    local keys = redis.call('HMGET', o.held, ...)
    local ended, freed, members, ready, holder_pairs, held_pairs = {}, {}, {}, {}, {}, {}
    for i, id in ipairs(chunk) do
      local key = keys[i]
      if key then
        ended[#ended + 1] = id
        local prefix = blocked_prefix(key)
        local member = redis.call('ZRANGEBYLEX', o.blocked, '[' .. prefix,
          '(' .. prefix .. '\255', 'LIMIT', 0, 1)[1]
        if member then
          local next_id = blocked_entry_id(member, #prefix)
          members[#members + 1] = member
          ready[#ready + 1] = o.now
          ready[#ready + 1] = next_id
          holder_pairs[#holder_pairs + 1] = key
          holder_pairs[#holder_pairs + 1] = next_id
          held_pairs[#held_pairs + 1] = next_id
          held_pairs[#held_pairs + 1] = key
        else
          freed[#freed + 1] = key
        end
      end
    end
    if #ended > 0 then call_with('HDEL', { o.held }, ended) end
    if #freed > 0 then call_with('HDEL', { o.holders }, freed) end
    if #members > 0 then
      call_with('ZREM', { o.blocked }, members)
      call_with('ZADD', { o.ready }, ready)
      call_with('HSET', { o.holders }, holder_pairs)
      call_with('HSET', { o.held }, held_pairs)
      o.handed = o.handed + #members
    end
  end)
end

-- The most pending entries ack_held reads for one consumer's range; past it,
-- a held delivery may go unacked (and is redelivered), never the reverse.
local ACK_RANGE_MAX = 100000

-- Acks of a consumer's deliveries, at most, that also look for one-entry
-- batch timers (ack_held).
local FEW_ACKS = 4

-- Whether stream id `a` comes before `b`: digits compared by length, then
-- as text (tonumber would round a sequence number past 2^53).
local function id_before(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)%-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)%-(%d+)$')
  if a_ms ~= b_ms then
    if #a_ms ~= #b_ms then return #a_ms < #b_ms end
    return a_ms < b_ms
  end
  if #a_seq ~= #b_seq then return #a_seq < #b_seq end
  return a_seq < b_seq
end

-- Adds to `members` the batch timers of `consumer` (the m pairs of first and
-- last id at ARGV[at]) that cover nothing any more: the consumer holds no
-- entry of their range. Run after the acks, with one XPENDING over all the
-- ranges: their stream says they are done, this makes sure. Past what that
-- XPENDING could read, they are left to be settled when they fall due.
local function covering_nothing(o, consumer, at, m, members)
  local ranges = {}
  for j = at, at + 2 * m - 1, 2 do ranges[#ranges + 1] = { ARGV[j], ARGV[j + 1] } end
  table.sort(ranges, function(x, y) return id_before(x[1], y[1]) end)
  local highest = ranges[1][2]
  for _, r in ipairs(ranges) do
    if id_before(highest, r[2]) then highest = r[2] end
  end
  local pending = redis.call('XPENDING', o.stream, o.group, ranges[1][1], highest,
    ACK_RANGE_MAX, consumer)
  if #pending >= ACK_RANGE_MAX then return end
  -- Both in id order: skip what lies before each range, look at the next.
  local p = 1
  for _, r in ipairs(ranges) do
    while pending[p] and id_before(pending[p][1], r[1]) do p = p + 1 end
    local held = pending[p] and not id_before(r[2], pending[p][1])
    if not held then members[#members + 1] = 'b/' .. consumer .. '/' .. r[1] .. '/' .. r[2] end
  end
end

-- Acknowledges deliveries still held by their consumer: they leave the
-- subscription's pending list (and timers) for good, and are counted once
-- each. A delivery that is no longer current (acked, nacked or redelivered
-- since) is left alone, so a stale or foreign ack id never acks what another
-- consumer now holds. On an ordered subscription each acked entry hands its
-- ordering key to the key's next entry.
--
-- The deliveries are ARGV[from] on, grouped by consumer: consumer, first id,
-- last id, n, m, n pairs: id, delivery count, and m pairs: first and last id
-- of a batch timer of that consumer's fetches (fetch_deliveries.lua) whose
-- every delivery its stream has acked, nacked or extended (OpenBatches in
-- the broker). One XPENDING per consumer (over the range of its ids) checks
-- them all: one per id made acking cost a third more. Each consumer's
-- XPENDING fails on a missing group, as it must. Returns how many were
-- acked, and which deliveries (`id/count/consumer`).
local function ack_held(o, from)
  local held = {}
  -- The acked deliveries as `id/count/consumer`: two ack ids of one entry
  -- (an old delivery's and the current one's) tell apart which was applied.
  local leases = {}
  -- Each acked entry's own timer; and, for a consumer's few acks, the batch
  -- timer of a fetch that handed out that entry alone (fetch_deliveries.lua),
  -- which covers nothing once it is acked. Acks come one or a few at a time
  -- at a low rate, where most fetches hand out one entry, whose timers would
  -- otherwise wait out the lease to be settled by a fetch; many acks at once
  -- follow fetches of many, whose timers no single entry's name matches.
  local timer_members = {}
  local finished = {} -- { consumer, i, m }: where its finished batches are in ARGV
  local i = from
  while i <= #ARGV do
    local consumer, first, last = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local n, m = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
    i = i + 5
    local counts = {}
    for _, p in ipairs(redis.call('XPENDING', o.stream, o.group, first, last, ACK_RANGE_MAX, consumer)) do
      counts[p[1]] = tonumber(p[4])
    end
    for j = i, i + 2 * n - 1, 2 do
      local id = ARGV[j]
      if counts[id] ~= nil and counts[id] == tonumber(ARGV[j + 1]) then
        held[#held + 1] = id
        leases[#leases + 1] = id .. '/' .. ARGV[j + 1] .. '/' .. consumer
        timer_members[#timer_members + 1] = id
        if n <= FEW_ACKS then
          timer_members[#timer_members + 1] = 'b/' .. consumer .. '/' .. id .. '/' .. id
        end
        counts[id] = nil -- an id given twice is acked once
      end
    end
    i = i + 2 * n
    if m > 0 then finished[#finished + 1] = { consumer, i, m } end
    i = i + 2 * m
  end
  local acked = 0
  in_chunks(held, function(...)
    acked = acked + redis.call('XACK', o.stream, o.group, ...)
  end)
  -- Under a cap on the subscription's leased messages, an ack frees room for
  -- any of its streams: counted as a handed key, it wakes them all.
  if acked > 0 and (tonumber(redis.call('HGET', o.settings, 'mout')) or 0) > 0 then
    o.handed = o.handed + 1
  end
  forget(o, held)
  for _, f in ipairs(finished) do
    covering_nothing(o, f[1], f[2], f[3], timer_members)
  end
  in_chunks(timer_members, function(...) redis.call('ZREM', o.timers, ...) end)
  if acked > 0 then redis.call('HINCRBY', o.settings, 'acked', acked) end
  release(o, held)
  return acked, leases
end

-- Hands `consumer` up to `n` entries that took their key and wait for a
-- consumer, oldest hand-over first, each with its own lease until
-- `deadline`. Returns the deliveries { {id, 1, fields}, ... } and how many
-- entries it took from the ready ZSET (0: none waits). Entries that
-- left the stream meanwhile (the hard cap; Redis drops them from the
-- pending list) release their key again, to the next.
local function take_ready(o, consumer, n, deadline)
  local out = {}
  if n <= 0 or not o.on() then return out, 0 end
  local ids = redis.call('ZRANGE', o.ready, 0, n - 1)
  if #ids == 0 then return out, 0 end
  redis.call('ZREM', o.ready, unpack(ids))
  local args = { o.stream, o.group, consumer, 0 }
  for _, id in ipairs(ids) do args[#args + 1] = id end
  local claimed = redis.call('XCLAIM', unpack(args))
  local got, timers = {}, {}
  for _, entry in ipairs(claimed) do
    got[entry[1]] = true
    out[#out + 1] = { entry[1], 1, entry[2] }
    timers[#timers + 1] = deadline
    timers[#timers + 1] = entry[1]
  end
  if #timers > 0 then redis.call('ZADD', o.timers, unpack(timers)) end
  local gone = {}
  for _, id in ipairs(ids) do
    if not got[id] then gone[#gone + 1] = id end
  end
  release(o, gone)
  return out, #ids
end

-- Copies an entry to the dead letters (unless `keep` is false: dead-lettering
-- is off and it is dropped) and takes it out of the subscription in the same
-- step, so it is dead-lettered exactly once; its key goes to the next entry.
-- Adds to the entry's fields: e (its stream id), i (message id, unless
-- scheduled messages already carry one), n (delivery attempts), r (reason).
local function dead_letter(o, dlq, id, attempts, reason, keep)
  local stream = o.stream
  local entry = keep and redis.call('XRANGE', stream, id, id)[1]
  if entry then
    local fields = entry[2]
    local has_message_id = false
    for f = 1, #fields, 2 do
      if fields[f] == 'i' then has_message_id = true end
    end
    if not has_message_id then
      fields[#fields + 1] = 'i'
      fields[#fields + 1] = id
    end
    fields[#fields + 1] = 'e'
    fields[#fields + 1] = id
    fields[#fields + 1] = 'n'
    fields[#fields + 1] = attempts
    fields[#fields + 1] = 'r'
    fields[#fields + 1] = reason
    redis.call('XADD', dlq, '*', unpack(fields))
  end
  redis.call('XACK', stream, o.group, id)
  forget(o, { id })
  redis.call('ZREM', o.timers, id)
  release(o, { id })
end

-- Ends a lease that ran out (or was nacked): dead letter after the last
-- attempt, else park until the retry time (keeping its key, on an ordered
-- subscription). Returns the wait until redelivery, or -1 when dead-lettered.
local function end_lease(o, dlq, id, attempts, delay, reason)
  local bmin, bmax, max_attempts, keep = retry_settings(o.settings)
  if max_attempts > 0 and attempts >= max_attempts then
    dead_letter(o, dlq, id, attempts, reason, keep)
    return -1
  end
  local wait = delay
  if wait < 0 then wait = backoff(bmin, bmax, attempts) end
  park(o.stream, o.timers, o.group, id, o.now + wait)
  return wait
end

-- Helpers shared by the scripts, prepended to each of them (see scripts.rs).

-- Redis' clock in ms: the one clock every replica agrees on.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
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

-- Copies an entry to the dead letters (unless `keep` is false: dead-lettering
-- is off and it is dropped) and takes it out of the subscription in the same
-- step, so it is dead-lettered exactly once.
-- Adds to the entry's fields: e (its stream id), i (message id, unless
-- scheduled messages already carry one), n (delivery attempts), r (reason).
local function dead_letter(stream, timers, dlq, group, id, attempts, reason, keep)
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
  redis.call('XACK', stream, group, id)
  redis.call('ZREM', timers, id)
end

-- Ends a lease that ran out (or was nacked): dead letter after the last
-- attempt, else park until the retry time. Returns the wait until redelivery,
-- or -1 when dead-lettered.
local function end_lease(stream, timers, dlq, group, settings_key, id, attempts, now, delay, reason)
  local bmin, bmax, max_attempts, keep = retry_settings(settings_key)
  if max_attempts > 0 and attempts >= max_attempts then
    dead_letter(stream, timers, dlq, group, id, attempts, reason, keep)
    return -1
  end
  local wait = delay
  if wait < 0 then wait = backoff(bmin, bmax, attempts) end
  park(stream, timers, group, id, now + wait)
  return wait
end


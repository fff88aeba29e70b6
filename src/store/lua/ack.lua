-- Acknowledges deliveries still held by their consumer: they leave the
-- subscription's pending list (and timers) for good, and are counted once
-- each. A delivery that is no longer current (acked, nacked or redelivered
-- since) is left alone, so a stale or foreign ack id never acks what another
-- consumer now holds.
--
-- The deliveries come grouped by consumer, so that one XPENDING per consumer
-- (over the range of its ids) checks them all: one per id made acking cost
-- a third more.
--
-- On an ordered subscription each acked entry hands its ordering key to the
-- key's next entry (lib.lua).
--
-- KEYS the subscription's lease keys (TopicKeys::lease_keys)
-- ARGV[1] group, ARGV[2] what to return ('n': the count, 'i': the ids), then
-- per consumer: consumer, first id, last id, n, and n pairs: id, delivery count
-- Returns { deliveries acked now, their ids (when asked, or when ordered),
--   1 when the subscription is ordered else 0, ordering keys handed on }

local stream, timers, settings = KEYS[1], KEYS[2], KEYS[3]
local group, want_ids = ARGV[1], ARGV[2] == 'i'
local o = ordering(group)
-- The most pending entries read for one consumer's range; past it, a held
-- delivery may go unacked (and is redelivered), never the reverse.
local RANGE_MAX = 100000
-- Each consumer's XPENDING below fails on a missing group, as it must.
if #ARGV < 3 then require_group(stream, group) end

local held = {}
local i = 3
while i <= #ARGV do
  local consumer, first, last, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  i = i + 4
  local counts = {}
  for _, p in ipairs(redis.call('XPENDING', stream, group, first, last, RANGE_MAX, consumer)) do
    counts[p[1]] = tonumber(p[4])
  end
  for j = i, i + 2 * n - 1, 2 do
    local id = ARGV[j]
    if counts[id] ~= nil and counts[id] == tonumber(ARGV[j + 1]) then
      held[#held + 1] = id
      counts[id] = nil -- an id given twice is acked once
    end
  end
  i = i + 2 * n
end

local acked = 0
in_chunks(held, function(...)
  acked = acked + redis.call('XACK', stream, group, ...)
  redis.call('ZREM', timers, ...)
end)
if acked > 0 then redis.call('HINCRBY', settings, 'acked', acked) end
release(o, held)
local ordered = o.on() and 1 or 0
return { acked, (want_ids or ordered == 1) and held or {}, ordered, o.handed }

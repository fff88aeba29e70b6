-- Acknowledges deliveries still held by their consumer (lib.lua's ack_held).
--
-- KEYS the subscription's lease keys (TopicKeys::lease_keys)
-- ARGV[1] group, ARGV[2] what to return ('n': the count, 'i': the ids), then
-- the deliveries, per consumer: consumer, first id, last id, n, m, n pairs:
-- id, delivery count, and m pairs: a finished batch timer's first and last id
-- Returns { deliveries acked now, which ones as `id/count/consumer` (when
--   asked, or when ordered),
--   1 when the subscription is ordered else 0, ordering keys handed on (one
--   more when the acks freed room under a cap on leased messages) }

local stream, group, want_ids = KEYS[1], ARGV[1], ARGV[2] == 'i'
local o = ordering(group)
if #ARGV < 3 then require_group(stream, group) end
local acked, leases = ack_held(o, 3)
local ordered = o.on() and 1 or 0
return { acked, (want_ids or ordered == 1) and leases or {}, ordered, o.handed }

-- Moves a subscription so that entries after ARGV[2] are delivered (again)
-- and the ones up to it count as acked.
--
-- An ordered subscription starts its ordering afresh: every pending entry
-- (held, parked, blocked or ready) is dropped and every key freed, and the entries
-- after ARGV[2] are read again, in stream order.
--
-- With ARGV[3] = '1' (Pub/Sub without retain_acked_messages) entries
-- acked after ARGV[2] stay acked: the group's position never moves back,
-- pending entries up to ARGV[2] are still acked.
--
-- KEYS the subscription's lease keys (TopicKeys::lease_keys)
-- ARGV[1] group, ARGV[2] last entry id to skip ('0-0': none), ARGV[3] '1'
-- to keep acked entries acked
-- Returns the number of pending deliveries acked by the move.

local stream, timers, group, last = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local o = ordering(group)
local position = last
if ARGV[3] == '1' and not o.on() then
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local fields = {}
    for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
    if fields['name'] == group and id_before(last, fields['last-delivered-id']) then
      position = fields['last-delivered-id']
    end
  end
end
redis.call('XGROUP', 'SETID', stream, group, position)
local upto = last
if o.on() then
  upto = '+'
  redis.call('DEL', o.holders, o.held, o.blocked, o.ready)
end
local acked = 0
if upto ~= '0-0' then
  while true do
    local pending = redis.call('XPENDING', stream, group, '-', upto, 1000)
    if #pending == 0 then break end
    local ids = {}
    for _, entry in ipairs(pending) do ids[#ids + 1] = entry[1] end
    acked = acked + redis.call('XACK', stream, group, unpack(ids))
    redis.call('ZREM', timers, unpack(ids))
  end
end
return acked

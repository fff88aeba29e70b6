-- Creates a subscription (consumer group, and its stream if needed) with its
-- settings, unless it exists; an existing subscription keeps its settings.
--
-- A new subscription starts with no ordering state: what a lost consumer
-- group (a failover) left of an earlier one is dropped.
--
-- KEYS[1] stream, KEYS[2] subscription settings HASH, KEYS[3..6] its key
-- holders, held keys, blocked and ready entries (see keys.rs)
-- ARGV[1] group, ARGV[2] start id ('0' or '$'), ARGV[3] backoff min ms,
-- ARGV[4] backoff max ms, ARGV[5] max delivery attempts, ARGV[6] ack deadline
-- ms (0: the server default), ARGV[7] dead lettering (1 on, 0 off),
-- ARGV[8] message ordering (1 on, 0 off), ARGV[9] most blocked entries,
-- ARGV[10] attribute filter ('' for none), ARGV[11] deliveries per second,
-- ARGV[12] burst, ARGV[13] most messages leased at once (0: no limit each)
-- Returns 1 when created, 0 when it existed.

local created = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[2], 'MKSTREAM')
if type(created) == 'table' and created.err then
  if not string.find(created.err, 'BUSYGROUP') then return redis.error_reply(created.err) end
  created = 0
else
  created = 1
end
if created == 1 then redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6]) end
if created == 1 or redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'bmin', ARGV[3], 'bmax', ARGV[4], 'max', ARGV[5],
    'ack', ARGV[6], 'dlq', ARGV[7], 'ord', ARGV[8], 'mblk', ARGV[9], 'flt', ARGV[10],
    'rate', ARGV[11], 'burst', ARGV[12], 'mout', ARGV[13])
end
return created

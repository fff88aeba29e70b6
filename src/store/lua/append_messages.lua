-- Appends messages that are neither scheduled nor deduplicated, in order,
-- and counts them. One script, not a pipeline: a Redis Cluster client re-sends
-- a pipeline whole when it meets ASK during a slot migration, which would
-- append its first entries twice.
--
-- KEYS[1] stream, KEYS[2] topic settings HASH (its `published` counter)
-- ARGV pairs: the ordering key ('' for none; the entry's `k` field) and the
-- encoded message (its `m` field)
-- Returns the entry ids, in order.

local ids = {}
for i = 1, #ARGV, 2 do
  if ARGV[i] == '' then
    ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'm', ARGV[i + 1])
  else
    ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'm', ARGV[i + 1], 'k', ARGV[i])
  end
end
redis.call('HINCRBY', KEYS[2], 'published', #ids)
return ids

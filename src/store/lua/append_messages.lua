-- Appends messages that are neither scheduled nor deduplicated, in order,
-- and counts them. One script, not a pipeline: a Redis Cluster client re-sends
-- a pipeline whole when it meets ASK during a slot migration, which would
-- append its first entries twice.
--
-- KEYS[1] stream, KEYS[2] topic settings HASH (its `published` counter)
-- ARGV the encoded messages (each entry's `m` field)
-- Returns the entry ids, in order.

local ids = {}
for i = 1, #ARGV do
  ids[i] = redis.call('XADD', KEYS[1], '*', 'm', ARGV[i])
end
redis.call('HINCRBY', KEYS[2], 'published', #ARGV)
return ids

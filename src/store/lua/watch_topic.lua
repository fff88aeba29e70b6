-- Puts a replica among a topic's watchers (or renews its place), until
-- Redis' now plus a time to live: the scripts that append hint it then.
--
-- KEYS[1] the topic's watchers HASH
-- ARGV[1] replica, ARGV[2] time to live in ms
-- Returns 1 when the replica was not there, else 0.

return redis.call('HSET', KEYS[1], ARGV[1], now_ms() + tonumber(ARGV[2]))

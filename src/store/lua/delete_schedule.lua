-- Deletes a recurring schedule: its HASH and its places in the topic's
-- ZSETs, together, so a run racing the delete finds no version and stops.
--
-- KEYS[1] the schedule's HASH, KEYS[2] the topic's schedules ZSET, KEYS[3]
-- the topic's due ZSET
-- ARGV[1] name
-- Returns 1, or 0 when there was no such schedule

redis.call('ZREM', KEYS[3], ARGV[1])
local existed = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return existed

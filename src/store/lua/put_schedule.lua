-- Creates or replaces a recurring schedule, if no run or other change moved
-- it since it was read (its version): the caller computed the next run from
-- what it read, and a run in between would make that next run a repeat.
-- `last` and `runs` are kept across replacements.
--
-- KEYS[1] the schedule's HASH, KEYS[2] the topic's schedules ZSET (names),
-- KEYS[3] the topic's due ZSET (name -> next run ms)
-- ARGV[1] name, ARGV[2] version read (0: it did not exist), ARGV[3] the spec
-- (protobuf), ARGV[4] next run ms ('' for none: paused or finished)
-- Returns 1, or 0 when the version changed (read again and retry)

local version = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if version ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'spec', ARGV[3], 'v', version + 1)
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[1], 'next')
  redis.call('ZREM', KEYS[3], ARGV[1])
else
  redis.call('HSET', KEYS[1], 'next', ARGV[4])
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1

-- Records a recurring schedule's due runs and publishes their messages in
-- one step: each message goes into the topic's scheduled ZSET and HASH, due
-- at its nominal time, where the promotion script (atomic, every replica)
-- publishes it to whatever the topic's kind is. Only if the schedule is at
-- the version the caller read: replicas racing for the same runs all read
-- the same version, one of them wins, the others find a new version and
-- publish nothing. So each nominal time is published once.
--
-- KEYS[1] the schedule's HASH, KEYS[2] the topic's due ZSET, KEYS[3]
-- scheduled ZSET, KEYS[4] scheduled HASH, KEYS[5] topic settings HASH (its
-- `published` counter)
-- ARGV[1] name, ARGV[2] version read, ARGV[3] next run ms ('' for none),
-- then per run, oldest first: message id, nominal time ms, the message as
-- the scheduled HASH holds it, its ordering key ('' for none)
-- Returns 1, or 0 when the version changed (nothing was done)

local version = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if version == 0 or version ~= tonumber(ARGV[2]) then return 0 end
local runs = 0
for i = 4, #ARGV, 4 do
  local id, due, body, key = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  redis.call('ZADD', KEYS[3], due, id)
  redis.call('HSET', KEYS[4], id, body)
  if key ~= '' then redis.call('HSET', KEYS[4], id .. '/k', key) end
  redis.call('HSET', KEYS[1], 'last', due)
  runs = runs + 1
end
if runs > 0 then
  redis.call('HINCRBY', KEYS[1], 'runs', runs)
  redis.call('HINCRBY', KEYS[5], 'published', runs)
end
redis.call('HSET', KEYS[1], 'v', version + 1)
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], 'next')
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], 'next', ARGV[3])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return 1

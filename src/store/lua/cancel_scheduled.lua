-- Cancels a scheduled message unless promotion took it first: the ZREM
-- decides, atomically with respect to promote_due.
--
-- KEYS[1] scheduled ZSET, KEYS[2] scheduled HASH
-- ARGV[1] message id
-- Returns 1 when cancelled, 0 when it was not scheduled (any more).

if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[1], ARGV[1] .. '/k')
  return 1
end
return 0

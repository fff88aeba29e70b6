-- Removes a consumer from its group when it holds no pending entries.
-- XGROUP DELCONSUMER on a consumer with pending entries would lose them.
--
-- KEYS[1] stream
-- ARGV[1] group, ARGV[2] consumer
-- Returns 1 when removed, 0 when it still holds entries.

local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #pending > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1

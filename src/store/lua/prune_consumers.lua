-- Removes the consumers of a group that hold nothing and have been idle for
-- longer than ARGV[2] ms: left behind by replicas that crashed, once their
-- deliveries were reclaimed. A consumer with pending entries is never removed.
--
-- KEYS[1] stream
-- ARGV[1] group, ARGV[2] minimum idle time in ms
-- Returns the number of consumers removed.

local removed = 0
local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, fields in ipairs(consumers) do
  local info = {}
  for i = 1, #fields, 2 do info[fields[i]] = fields[i + 1] end
  if tonumber(info['pending']) == 0 and tonumber(info['idle']) > tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed = removed + 1
  end
end
return removed

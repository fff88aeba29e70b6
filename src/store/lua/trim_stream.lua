-- Retention: trims the topic stream, never past an entry some subscription
-- still needs (pending, or not yet delivered to it). Within that bound it
-- trims what retention allows: entries older than max_age or beyond max_len
-- when the topic sets them, else older than the server's default max age,
-- else (default 0) everything every subscription has acked.
-- Then the hard cap, if set, drops the oldest entries regardless, counted in
-- the topic's `dropped` counter.
--
-- KEYS[1] stream, KEYS[2] topic settings HASH
-- ARGV[1] max age in ms for topics without retention settings (0: trim what is acked)
-- Returns { entries trimmed, entries dropped by the hard cap }

local stream, settings = KEYS[1], KEYS[2]
if redis.call('EXISTS', stream) == 0 then return { 0, 0 } end
local now = now_ms()

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function less(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
local function successor(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return ms .. '-' .. string.format('%.0f', tonumber(seq) + 1)
end

-- The oldest entry a subscription still needs.
local needed = nil
local groups = redis.call('XINFO', 'GROUPS', stream)
for _, group in ipairs(groups) do
  local info = {}
  for f = 1, #group, 2 do info[group[f]] = group[f + 1] end
  local need = successor(info['last-delivered-id'])
  local first_pending = redis.call('XPENDING', stream, info['name'], '-', '+', 1)[1]
  if first_pending and less(first_pending[1], need) then need = first_pending[1] end
  if not needed or less(need, needed) then needed = need end
end

-- What retention allows.
local s = redis.call('HMGET', settings, 'max_age', 'max_len', 'hard_max')
local max_age, max_len, hard_max = tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0
if max_age == 0 and max_len == 0 then max_age = tonumber(ARGV[1]) end
local allowed = nil -- trim entries before this id; nil: no retention limit
if max_age > 0 then allowed = string.format('%.0f', now - max_age) .. '-0' end
if max_len > 0 then
  local excess = redis.call('XLEN', stream) - max_len
  if excess > 0 then
    local range = redis.call('XRANGE', stream, '-', '+', 'COUNT', excess + 1)
    local keep_from = range[#range][1]
    if not allowed or less(allowed, keep_from) then allowed = keep_from end
  end
end
if max_age == 0 and max_len == 0 then allowed = needed end

local trim_to = allowed
if needed and trim_to and less(needed, trim_to) then trim_to = needed end
local trimmed = 0
if trim_to then trimmed = redis.call('XTRIM', stream, 'MINID', trim_to) end

local dropped = 0
if hard_max > 0 and redis.call('XLEN', stream) > hard_max then
  dropped = redis.call('XTRIM', stream, 'MAXLEN', hard_max)
  redis.call('HINCRBY', settings, 'dropped', dropped)
end
return { trimmed, dropped }

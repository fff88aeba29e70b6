-- Publishes requests in which some messages are scheduled or carry a dedupe
-- id, or that carry a request dedupe id (plain ones go to append_messages).
-- Per message, in order: the dedupe check and claim, then XADD now, or ZADD +
-- HSET when it is due later. One script, so a crash never leaves a dedupe
-- claim without its messages.
--
-- KEYS[1] stream, KEYS[2] scheduled ZSET, KEYS[3] scheduled HASH, KEYS[4] topic
-- settings HASH (its `published` counter), KEYS[5] the topic's watchers
-- HASH, KEYS[6..] dedupe keys
-- ARGV[1] dedupe window in ms, ARGV[2..4] who publishes, the hints channel
-- and the hint for the other watchers (see hint_watchers), ARGV[5] the
-- topic's Pub/Sub channel when it is EPHEMERAL ('' for a STREAM topic: a
-- message due now goes to the channel as "<id> <now> <message>", with the
-- id given for it, instead of the stream), then records of
-- six values. A message: id to
--   use if scheduled, due kind ('n' now, 'a' at ms, 'd' after ms), amount,
--   dedupe key index in KEYS (0: none), the encoded message (the entry's `m`
--   field), its ordering key ('' for none; the entry's `k` field, kept in the
--   scheduled HASH as `<id>/k` until promotion). A request's start, before
--   its messages when it has a dedupe id: '', 'r', its message count, the
--   index of its dedupe key, '', ''.
-- Returns { now, { {id, duplicate (0/1), due ms (0 when unknown)}, ... },
--   { {request number, first count}, ... } }. A duplicate's due ms is the
--   original's. A request whose dedupe id was first used for another number
--   of messages publishes nothing, has no place in the list of messages, and
--   is named in the last list (requests with a dedupe id counted from 1).

local stream, scheduled, messages, settings = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local window, channel = ARGV[1], ARGV[5]
local now = now_ms()
local out = {}
local published, appended = 0, 0

-- The time in a stream entry id: when it was appended (Redis' clock may have
-- moved on since `now`).
local function entry_ms(id)
  return tonumber(string.match(id, '^(%d+)%-%d+$')) or 0
end

-- A dedupe key holds the original's id, and for a scheduled message also its
-- due time as published: "<id> <due ms>". The due time of a duplicate is the
-- original's: its current one while it is scheduled (rescheduling moves it),
-- else the one it was published with, else the time in its entry id.
local function original_of(claim)
  local id, due = string.match(claim, '^(%S+) (%d+)$')
  if not id then id = claim end
  local current = redis.call('ZSCORE', scheduled, id)
  if current then return id, tonumber(current) end
  if due then return id, tonumber(due) end
  return id, entry_ms(id)
end

-- What a dedupe key holds for one message: "<id>", or "<id> <due ms>" when
-- it is a scheduled message (its id tells no time).
local function claim_of(id, due)
  if due ~= entry_ms(id) then return id .. ' ' .. due end
  return id
end

-- The request being published under its dedupe id: its key, and where its
-- messages start and end in `out`.
local request_key, request_start, request_end
local requests, mismatches = 0, {}

local i = 6
while i <= #ARGV do
  local scheduled_id, kind, amount = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local dedupe, message, key = tonumber(ARGV[i + 3]), ARGV[i + 4], ARGV[i + 5]
  i = i + 6

  if kind == 'r' then
    requests = requests + 1
    local claim = redis.call('GET', KEYS[dedupe])
    if claim then
      -- A retry: answer the first one's messages, publish nothing. A token
      -- "<ms>-<seq>+<n>" is a run of appended ids (append_messages.lua).
      local first_count = 0
      for token in string.gmatch(claim, '[^,]+') do
        first_count = first_count + 1 + (tonumber(string.match(token, '%+(%d+)$')) or 0)
      end
      if first_count == amount then
        for token in string.gmatch(claim, '[^,]+') do
          local ms, seq, more = string.match(token, '^(%d+)%-(%d+)%+(%d+)$')
          if ms then
            for n = 0, tonumber(more) do
              out[#out + 1] = { ms .. '-' .. (tonumber(seq) + n), 1, tonumber(ms) }
            end
          else
            local original, due = original_of(token)
            out[#out + 1] = { original, 1, due }
          end
        end
      else
        mismatches[#mismatches + 1] = { requests, first_count }
      end
      i = i + 6 * amount
    else
      request_key, request_start, request_end = KEYS[dedupe], #out + 1, #out + amount
    end
  else
    local claim = dedupe > 0 and redis.call('GET', KEYS[dedupe])
    if claim then
      local original, due = original_of(claim)
      out[#out + 1] = { original, 1, due }
    else
      local due = now
      if kind == 'a' then due = amount elseif kind == 'd' then due = now + amount end
      local id
      if due > now then
        id = scheduled_id
        redis.call('ZADD', scheduled, due, id)
        redis.call('HSET', messages, id, message)
        if key ~= '' then redis.call('HSET', messages, id .. '/k', key) end
      elseif channel ~= '' then
        id = scheduled_id
        redis.call('PUBLISH', channel, id .. ' ' .. now .. ' ' .. message)
        due = now
      elseif key ~= '' then
        id = redis.call('XADD', stream, '*', 'm', message, 'k', key)
        due = entry_ms(id)
        appended = appended + 1
      else
        id = redis.call('XADD', stream, '*', 'm', message)
        due = entry_ms(id)
        appended = appended + 1
      end
      if dedupe > 0 then redis.call('SET', KEYS[dedupe], claim_of(id, due), 'PX', window) end
      out[#out + 1] = { id, 0, due }
      published = published + 1
    end
    if request_key and #out == request_end then
      -- The request's claim: every message's, in order, one key for all.
      local claims = {}
      for n = request_start, request_end do
        claims[#claims + 1] = claim_of(out[n][1], out[n][3])
      end
      redis.call('SET', request_key, table.concat(claims, ','), 'PX', window)
      request_key = nil
    end
  end
end
if published > 0 then redis.call('HINCRBY', settings, 'published', published) end
if appended > 0 then hint_watchers(KEYS[5], ARGV[2], ARGV[3], ARGV[4]) end
return { now, out, mismatches }

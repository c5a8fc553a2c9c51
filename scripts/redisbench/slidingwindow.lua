-- Sliding window counter with the semantics of limitd's sliding_window:
-- two fixed windows aligned to multiples of the window since the epoch; at a
-- time r into the current window the weighted count is
--   (1 - r/window) * previous + current
-- and a request of cost c is allowed if weighted + c <= limit. Multiplied out
-- by window, every comparison is on integers:
--   (window - r) * previous + (current + c) * window <= limit * window
-- Lua numbers are doubles, exact for integers below 2^53, so the script
-- refuses limit * window >= 2^53 instead of rounding. Divisions are done as
-- (a - fmod(a, b)) / b, which is exact, never as floor(a / b), which is not.
-- The previous count counts only if it is the window immediately before;
-- refused requests are not counted; cost 0 is a peek (allowed reports whether
-- a cost of 1 would be) and writes nothing. Time going backwards is decided at
-- the start of the stored window, as limitd clamps time.
--
-- KEYS[1]  the limited key: a hash {w = window index, c = current, p = previous}
-- ARGV[1]  limit
-- ARGV[2]  window in microseconds
-- ARGV[3]  cost
-- ARGV[4]  optional: now in microseconds since the epoch. Without it the
--          script reads Redis's clock (TIME), as limitd's leader stamps time.
-- Returns {allowed (1 or 0), remaining}, remaining being the cost that could
-- still be spent right now after this request.
-- The key expires when it can no longer matter: at the end of the window after
-- the one holding its current count.

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
if not limit or not window or not cost or limit < 1 or window < 1 or cost < 0 then
  return redis.error_reply('usage: limit >= 1, window (us) >= 1, cost >= 0')
end
local lw = limit * window
if lw >= 9007199254740992 then
  return redis.error_reply('limit * window (us) must be below 2^53')
end

local now
if ARGV[4] and ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local elapsed = math.fmod(now, window)
local idx = (now - elapsed) / window

local st = redis.call('HMGET', KEYS[1], 'w', 'c', 'p')
local w = tonumber(st[1])
local cur, prev = 0, 0
if w then
  if w >= idx then
    -- The stored window, or a later one (the clock went back): decide at the
    -- stored window's start.
    if w > idx then
      idx, elapsed = w, 0
    end
    cur, prev = tonumber(st[2]) or 0, tonumber(st[3]) or 0
  elseif w == idx - 1 then
    prev = tonumber(st[2]) or 0
  end
end

local c = cost
if c == 0 then
  c = 1
end
local used = (window - elapsed) * prev + cur * window
local allowed = 0
if c <= limit and used + c * window <= lw then
  allowed = 1
  if cost > 0 then
    cur = cur + cost
    used = used + cost * window
    redis.call('HSET', KEYS[1], 'w', idx, 'c', cur, 'p', prev)
    local ttl = (idx + 2) * window - now -- microseconds, > 0
    local ms = (ttl - math.fmod(ttl, 1000)) / 1000
    if math.fmod(ttl, 1000) > 0 then
      ms = ms + 1
    end
    redis.call('PEXPIRE', KEYS[1], ms)
  end
end

local left = lw - used
local remaining = 0
if left > 0 then
  remaining = (left - math.fmod(left, window)) / window
end
return {allowed, remaining}

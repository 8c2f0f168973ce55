-- wait.lua is acquire.lua for a caller that will wait. It grants a free key
-- (or one its owner holds) and returns the token as an integer; returns
-- the token of a grant already handed to this waiter; or else queues the
-- waiter, or renews its place, and returns "<latest>:<deadline>": the
-- highest token granted so far (the holder's) and the place's deadline.
--
-- KEYS[1..3]  lock, fence, queue (see lib.lua)
-- ARGV[1]     owner
-- ARGV[2]     TTL in milliseconds
-- ARGV[3]     waiter id, "<backend id>:<sequence number>"
-- ARGV[4]     how long the place is kept without another attempt, in ms
-- ARGV[5]     expiry of the queue key, in ms
-- ARGV[6]     the deadline of the waiter's place, "" if it has none yet
-- ARGV[7]     "" or, for a waiter's first attempt on a key its backend
--             saw contended a moment ago, the deadline of its new place
--             on the server's clock, as the backend estimates it from the
--             server's time a recent attempt reported (never later than
--             the server's own reckoning, see waiter.go)
--
-- Queue first: with ARGV[7], the waiter joins the queue before anything is
-- read, and if others were queued already it stays there, in one call:
-- a released key goes to the head of the queue, so a queue with waiters
-- in it almost always belongs to a held key. (When the holder's lease
-- expired instead, the key is free with waiters queued, and they take it
-- at their next attempt, on their backoff, as without queue first.) The
-- latest token reported is then 0: no grant can have been handed to a
-- waiter before its first attempt.

local tail = ':' .. ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[1]
-- A place kept longer than half the queue's expiry renews it at once.
local long_stay = tonumber(ARGV[4]) * 2 > tonumber(ARGV[5])
local placed = false -- whether this call queued the waiter already
if ARGV[7] ~= '' then
  local n = redis.call('RPUSH', KEYS[3], ARGV[7] .. tail)
  if n > 1 then
    -- The queue's expiry is set when it is created and renewed by
    -- handoffs (lib.lua's pass_on) and places renewed below.
    if long_stay then
      redis.call('PEXPIRE', KEYS[3], ARGV[5])
    end
    return '0:' .. ARGV[7]
  end
  placed = true
end

local v = redis.call('MGET', KEYS[1], KEYS[2])
local held = v[1]
if held then
  local tok, owner = split(held)
  if owner == ARGV[1] then
    if v[2] == fence_value(tok, ARGV[3], ARGV[1]) then
      -- Handed to this waiter by a release whose message has not been
      -- taken (or was lost): claim it, keeping its token and expiry.
      if placed then redis.call('DEL', KEYS[3]) end
      return tonumber(tok)
    end
    -- Held by this owner otherwise: re-grant below with a new token, as
    -- acquire.lua does.
  elseif placed then
    -- The queue was created by this call.
    redis.call('PEXPIRE', KEYS[3], ARGV[5])
    return (tok or '0') .. ':' .. ARGV[7]
  else
    -- A place lapses at its deadline on the server's clock. Renewing it
    -- keeps the waiter's position, if the place is still in the queue.
    local deadline = string.format('%d', math.floor(now_us() / 1000) + tonumber(ARGV[4]))
    local i = nil
    if ARGV[6] ~= '' then
      i = redis.call('LPOS', KEYS[3], ARGV[6] .. tail)
    end
    if i then
      redis.call('LSET', KEYS[3], i, deadline .. tail)
      redis.call('PEXPIRE', KEYS[3], ARGV[5])
    elseif redis.call('RPUSH', KEYS[3], deadline .. tail) == 1 or long_stay then
      redis.call('PEXPIRE', KEYS[3], ARGV[5])
    end
    return (tok or '0') .. ':' .. deadline
  end
end

-- Granted. A place this waiter still has in the queue (a free key with
-- waiters queued is one whose lease expired instead of being released)
-- would lapse by itself; it is removed so that it is not handed the key
-- again. One this call made is the queue's only entry.
if placed then
  redis.call('DEL', KEYS[3])
elseif ARGV[6] ~= '' then
  redis.call('LREM', KEYS[3], 1, ARGV[6] .. tail)
end
return tonumber(grant(KEYS, head(v[2]), now_us(), ARGV[1], ARGV[2]))

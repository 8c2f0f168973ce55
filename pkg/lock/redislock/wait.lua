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

local held = redis.call('GET', KEYS[1])
if held then
  local tok, owner = split(held)
  if owner == ARGV[1] then
    if redis.call('GET', KEYS[2]) == tok .. ':' .. ARGV[3] then
      -- Handed to this waiter by a release whose message has not been
      -- taken (or was lost): claim it, keeping its token and expiry.
      return tonumber(tok)
    end
    -- Held by this owner otherwise: re-grant below with a new token, as
    -- acquire.lua does.
  else
    -- A place lapses at its deadline on the server's clock. Renewing it
    -- keeps the waiter's position, if the place is still in the queue.
    local tail = ':' .. ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[1]
    local deadline = string.format('%d', math.floor(now_us() / 1000) + tonumber(ARGV[4]))
    local i = nil
    if ARGV[6] ~= '' then
      i = redis.call('LPOS', KEYS[3], ARGV[6] .. tail)
    end
    if i then
      redis.call('LSET', KEYS[3], i, deadline .. tail)
    else
      redis.call('RPUSH', KEYS[3], deadline .. tail)
      redis.call('PEXPIRE', KEYS[3], ARGV[5])
    end
    return (tok or '0') .. ':' .. deadline
  end
end

-- Granted. A place this waiter still has in the queue (a free key with
-- waiters queued is one whose lease expired instead of being released)
-- would lapse by itself; it is removed so that it is not handed the key
-- again.
if ARGV[6] ~= '' then
  redis.call('LREM', KEYS[3], 1, ARGV[6] .. ':' .. ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[1])
end
return tonumber(grant(KEYS, head(redis.call('GET', KEYS[2])), now_us(), ARGV[1], ARGV[2]))

-- acquire.lua grants a lease and returns its fencing token, or nil when
-- another owner holds the key. It never queues the caller: that is
-- wait.lua's.
--
-- KEYS[1..4]  lock, fence, queue (unused), waiters (see lib.lua)
-- ARGV[1]     owner
-- ARGV[2]     TTL in milliseconds
-- ARGV[3]     how long a refusal marks the key as waited for, in milliseconds
-- ARGV[4]     id of the calling backend (one per process, typically)
--
-- The script runs atomically, so reading the lock key and then writing it is
-- the same as SET NX: nothing can slip in between. It cannot be a plain
-- SET NX because the value holds the token, and the token is only drawn
-- once the grant is certain, so refused attempts never burn tokens.

local v = redis.call('MGET', KEYS[1], KEYS[2])
local held = v[1]
if held then
  local _, owner = split(held)
  if owner ~= ARGV[1] then
    -- Held by another owner. Note which backend waits, so that a release
    -- that finds no queued waiter is published only when a backend other
    -- than the releasing one waits: every subscribed process receives
    -- every such message, and the releasing backend wakes its own
    -- waiters without one.
    redis.call('SADD', KEYS[4], ARGV[4])
    redis.call('PEXPIRE', KEYS[4], ARGV[3])
    return false -- nil reply
  end
  -- Same owner: re-grant with a new token below. Its older lease is
  -- superseded, because its value (old token) no longer matches.
end

return tonumber(grant(KEYS, head(v[2]), now_us(), ARGV[1], ARGV[2]))

-- acquire.lua grants a lease and returns its fencing token, or nil when
-- another owner holds the key.
--
-- KEYS[1]  lock key     ("<prefix>{<key>}"), value "<token>:<owner>", with PX
-- KEYS[2]  fence key    ("<prefix>{<key>}<suffix>"), never deleted or expired
-- KEYS[3]  waiters key  ("<prefix>{<key>}:waiters"), the set of backends
--          refused the key lately
-- ARGV[1]  owner
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  how long a refusal marks the key as waited for, in milliseconds
-- ARGV[4]  id of the calling backend (one per process, typically)
--
-- The script runs atomically, so reading the lock key and then writing it is
-- the same as SET NX: nothing can slip in between. It cannot be a plain
-- SET NX because the value holds the token, and the token is only drawn
-- once the grant is certain, so refused attempts never burn tokens.

-- Redis before 5.0 replicates the script itself, not its effects, and then
-- refuses writes after TIME (non-deterministic). Later versions always
-- replicate effects and keep this call only as a no-op.
if redis.replicate_commands then redis.replicate_commands() end

local held = redis.call('GET', KEYS[1])
if held then
  -- The value is "<token>:<owner>"; tokens are digits, so the owner is
  -- everything after the first colon and may itself contain colons.
  local sep = string.find(held, ':', 1, true)
  if not sep or string.sub(held, sep + 1) ~= ARGV[1] then
    -- Held by another owner. Note which backend waits, so that the
    -- release is published only when a backend other than the releasing
    -- one waits: every subscribed process receives every message, and the
    -- releasing backend wakes its own waiters without one.
    redis.call('SADD', KEYS[3], ARGV[4])
    redis.call('PEXPIRE', KEYS[3], ARGV[3])
    return false -- nil reply
  end
  -- Same owner: re-grant with a new token below. Its older lease is
  -- superseded, because its value (old token) no longer matches.
end

-- The token is max(last token, server time in microseconds) + 1. The plain
-- counter alone would restart from 1 whenever the fence key is lost: a
-- restart without persistence, a restore from a snapshot older than the
-- last grants, a failover to a replica that had not yet seen them, or an
-- allkeys-* eviction. Pulling it up to the clock makes the next token larger
-- than any token granted before the loss, as long as the server clock has
-- not gone backwards and grants on one key averaged under one per
-- microsecond (a Redis round trip alone takes longer).
--
-- Every number here stays below 2^53 (microseconds since 1970 reach it in
-- the year 2255), so a Lua double holds it exactly; but tostring and ..
-- would print 1.7e+15 and lose the low digits, so numbers become strings
-- only through string.format('%d').
local t = redis.call('TIME')
local now = tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = math.max(last, now) + 1
local tok = string.format('%d', token)
redis.call('SET', KEYS[2], tok)

-- PX, never EX: the lease must not outlive the holder's own idea of it by a
-- second (go-redis's SetNX, for one, switches to EX for whole seconds).
redis.call('SET', KEYS[1], tok .. ':' .. ARGV[1], 'PX', ARGV[2])
return token

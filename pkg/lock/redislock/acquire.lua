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
-- (INCR) once the grant is certain, so refused attempts never burn tokens.

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
-- The time is assembled as a string: arithmetic on it would yield a Lua
-- double, which tostring prints as 1.7e+15 and so loses the low digits.
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local last = redis.call('GET', KEYS[2])
if not last or tonumber(last) < tonumber(now) then
  redis.call('SET', KEYS[2], now)
end
local token = redis.call('INCR', KEYS[2])

-- PX, never EX: the lease must not outlive the holder's own idea of it by a
-- second (go-redis's SetNX, for one, switches to EX for whole seconds).
-- string.format('%d') prints the token exactly (integers up to 2^53 are
-- exact in a double; micros since 1970 reach that in the year 2255).
redis.call('SET', KEYS[1], string.format('%d', token) .. ':' .. ARGV[1], 'PX', ARGV[2])
return token

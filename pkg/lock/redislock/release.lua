-- release.lua deletes the lock key only if it still holds this lease, and
-- then, if another backend was refused the key lately, tells the waiters,
-- so that they retry now instead of sleeping out their backoff.
--
-- KEYS[1]  lock key
-- KEYS[2]  waiters key, the set of backends acquire.lua refused lately
-- ARGV[1]  the lease's value, "<token>:<owner>"
-- ARGV[2]  release channel of the key
-- ARGV[3]  token (the message payload)
-- ARGV[4]  id of the calling backend, which wakes its own waiters itself
--
-- Comparing the whole value, not just the owner, keeps a superseded or
-- expired lease from deleting its successor's key: after an expiry and a
-- takeover, or a re-grant to the same owner, the token differs.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- The waiters set is left to expire: its backends may still be waiting.
local n = redis.call('SCARD', KEYS[2])
if n > 1 or (n == 1 and redis.call('SISMEMBER', KEYS[2], ARGV[4]) == 0) then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1

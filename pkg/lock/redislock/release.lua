-- release.lua frees the lock only if it still holds this lease, handing it
-- to the next queued waiter if there is one (lib.lua's pass_on). It returns
-- 0 when the lease was not the current one, else pass_on's answer.
--
-- KEYS[1..4]  lock, fence, queue, waiters (see lib.lua)
-- ARGV[1]     the lease's value, "<token>:<owner>"
-- ARGV[2]     release channel of the key
-- ARGV[3]     id of the calling backend
-- ARGV[4]     grant channel prefix
--
-- Comparing the whole value, not just the owner, keeps a superseded or
-- expired lease from freeing its successor's key: after an expiry and a
-- takeover, or a re-grant to the same owner, the token differs.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return pass_on(KEYS, head(ARGV[1]), ARGV[2], ARGV[3], ARGV[4])

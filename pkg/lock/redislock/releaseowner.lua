-- releaseowner.lua frees the lock if the given owner holds it, whatever
-- the token, as release.lua frees a lease (lib.lua's pass_on: the next
-- queued waiter is handed the key). It returns 0 when the lock is free or
-- held by another owner, and changed nothing; else pass_on's answer. It
-- never grants the lock to the owner.
--
-- KEYS[1..4]  lock, fence, queue, waiters (see lib.lua)
-- ARGV[1]     owner
-- ARGV[2]     release channel of the key
-- ARGV[3]     id of the calling backend
-- ARGV[4]     grant channel prefix
-- ARGV[5]     expiry of the queue key, in ms
local held = redis.call('GET', KEYS[1])
if not held then return 0 end
local tok, owner = split(held)
if owner ~= ARGV[1] then return 0 end
return pass_on(KEYS, tonumber(tok), nil, ARGV[2], ARGV[3], ARGV[4], ARGV[5])

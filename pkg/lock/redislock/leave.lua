-- leave.lua takes a waiter that gives up out of the queue and, if the key
-- was handed to it and it has not taken it, frees the key as release.lua
-- does. It returns 0 when nothing was handed to the waiter, else pass_on's
-- answer.
--
-- KEYS[1..4]  lock, fence, queue, waiters (see lib.lua)
-- ARGV[1]     owner
-- ARGV[2]     TTL in milliseconds of its attempts
-- ARGV[3]     waiter id
-- ARGV[4]     the deadline of the waiter's place, "" if it has none
-- ARGV[5]     release channel of the key
-- ARGV[6]     id of the calling backend
-- ARGV[7]     grant channel prefix
-- ARGV[8]     expiry of the queue key, in ms
if ARGV[4] ~= '' then
  redis.call('LREM', KEYS[3], 1, ARGV[4] .. ':' .. ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[1])
end
local v = redis.call('MGET', KEYS[1], KEYS[2])
if not v[1] then return 0 end
local tok, owner = split(v[1])
if owner ~= ARGV[1] or v[2] ~= fence_value(tok, ARGV[3], ARGV[1]) then
  return 0
end
return pass_on(KEYS, tonumber(tok), nil, ARGV[5], ARGV[6], ARGV[7], ARGV[8])

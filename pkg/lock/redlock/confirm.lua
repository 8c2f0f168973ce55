-- confirm.lua is the last round of a grant, on each server: it records the
-- grant's token in the fence, but only while this server still holds the
-- grant's lease and no grant with an equal or higher token has been
-- confirmed here. A grant counts only if a majority confirms it; any two
-- majorities share a server, on which the later grant's confirmation found
-- the earlier one's token, so confirmed tokens increase.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence key
-- ARGV[1]  the lease's value, "<token>:<owner>"
-- ARGV[2]  the token
--
-- Returns 1 when confirmed, 0 when the lease is not held here, -1 when the
-- fence is already at or above the token.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local fence = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if fence >= tonumber(ARGV[2]) then
  return -1
end
redis.call('SET', KEYS[2], ARGV[2])
return 1

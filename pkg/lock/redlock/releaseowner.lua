-- releaseowner.lua frees the lock key on one server if the given owner
-- holds it there, whatever the token, and otherwise changes nothing. It
-- never takes the key.
--
-- KEYS[1]  lock key, "<token>:<owner>" while held
-- ARGV[1]  owner
--
-- Returns 1 when the key was deleted, 0 otherwise. Tokens are digits, so
-- the owner is everything after the first colon.
local held = redis.call('GET', KEYS[1])
if held then
  local sep = string.find(held, ':', 1, true)
  if sep and string.sub(held, sep + 1) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
  end
end
return 0

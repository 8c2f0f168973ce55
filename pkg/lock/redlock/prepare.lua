-- prepare.lua is the first round of a grant, on each server: it frees a
-- lease the same owner holds (a re-grant supersedes it) and returns the
-- floor of the next token on this server, the larger of the fence and the
-- server's clock in microseconds, as a decimal string.
--
-- KEYS[1]  lock key, "<token>:<owner>" while held
-- KEYS[2]  fence key, the last token confirmed on this server
-- ARGV[1]  owner

-- Redis before 5.0 refuses writes after TIME unless effects are replicated.
if redis.replicate_commands then redis.replicate_commands() end

local held = redis.call('GET', KEYS[1])
if held then
  local sep = string.find(held, ':', 1, true)
  if sep and string.sub(held, sep + 1) == ARGV[1] then
    redis.call('DEL', KEYS[1])
  end
end

-- Numbers stay below 2^53, exact in a Lua double; they become strings only
-- through string.format('%d'), never tostring (which would print 1.7e+15).
local t = redis.call('TIME')
local now = tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
local fence = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
return string.format('%d', math.max(fence, now))

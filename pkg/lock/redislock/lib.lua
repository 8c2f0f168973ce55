-- lib.lua is prepended to every script that grants or frees a lock: the
-- token arithmetic, and the handoff of a released key to the next queued
-- waiter, each written once.
--
-- Keys of a lock k (all in k's hash slot), in the order the scripts take
-- them:
--   1 lock     "<prefix>{k}"          "<token>:<owner>", PX the lease's TTL
--   2 fence    "<prefix>{k}<suffix>"  the last grant, never expired:
--                                     "<token>:<waiter id>:<owner>", the
--                                     waiter id empty unless the grant was
--                                     handed to a queued waiter (older
--                                     versions wrote "<token>" and
--                                     "<token>:<waiter id>")
--   3 queue    "<prefix>{k}:queue"    list of waiters, oldest first, each
--                                     "<deadline ms>:<ttl ms>:<waiter id>:<owner>"
--   4 waiters  "<prefix>{k}:waiters"  set of backends refused k lately
--                                     without queueing (plain TryAcquire)
-- A waiter id is "<backend id>:<sequence number>"; the backend hears its
-- grants on "<grant channel prefix><backend id>".
--
-- Each redis.call costs the server about as much as a small command from a
-- client, so the scripts make as few as they can: a contended lock cycle
-- is one RPUSH (wait.lua, a waiter's first attempt) and LPOP, TIME, SET
-- ... GET, SET and, across processes, PUBLISH (release.lua).

-- Redis before 5.0 replicates a script itself, not its effects, and then
-- refuses writes after TIME (non-deterministic). Later versions always
-- replicate effects and keep this call only as a no-op.
if redis.replicate_commands then redis.replicate_commands() end

-- now_us returns the server's clock in microseconds.
--
-- Every number here stays below 2^53 (microseconds since 1970 reach it in
-- the year 2255), so a Lua double holds it exactly; but tostring and ..
-- would print 1.7e+15 and lose the low digits, so numbers become strings
-- only through string.format('%d').
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
end

-- head returns the number before the first colon of s (all of s if it
-- has none), or 0.
local function head(s)
  if not s then return 0 end
  local sep = string.find(s, ':', 1, true)
  if sep then s = string.sub(s, 1, sep - 1) end
  return tonumber(s) or 0
end

-- split returns the token and the owner of a lease value "<token>:<owner>";
-- tokens are digits, so the owner is everything after the first colon and
-- may itself contain colons.
local function split(value)
  local sep = string.find(value, ':', 1, true)
  if not sep then return nil, nil end
  return string.sub(value, 1, sep - 1), string.sub(value, sep + 1)
end

-- fence_value is what the fence holds for a grant of tok to owner, handed
-- to waiter (a waiter id, or nil for a grant made to its caller).
local function fence_value(tok, waiter, owner)
  return tok .. ':' .. (waiter or '') .. ':' .. owner
end

-- fence_lease returns the lease value "<token>:<owner>" of the grant a
-- fence value records, or nil for a fence of an older version or none.
local function fence_lease(f)
  if not f then return nil end
  local a = string.find(f, ':', 1, true)
  if not a then return nil end
  local b = a
  if string.sub(f, a + 1, a + 1) ~= ':' then
    -- "<token>:<backend id>:<seq>:<owner>": skip the waiter id
    b = string.find(f, ':', a + 1, true)
    b = b and string.find(f, ':', b + 1, true)
    if not b then return nil end
  else
    b = a + 1
  end
  return string.sub(f, 1, a) .. string.sub(f, b + 1)
end

-- grant gives the lock to owner for ttl ms with the next token, and returns
-- the token as a string. The token is max(last token, server time in
-- microseconds) + 1, where last is the fence's, or the holder's when the
-- lock is held (the holder's grant was the last one). The plain counter
-- alone would restart from 1 whenever the fence key is lost: a restart
-- without persistence, a restore from a snapshot older than the last
-- grants, a failover to a replica that had not yet seen them, or an
-- allkeys-* eviction. Pulling it up to the clock makes the next token
-- larger than any token granted before the loss, as long as the server
-- clock has not gone backwards and grants on one key averaged under one
-- per microsecond (a Redis round trip alone takes longer). waiter, if
-- given, is recorded with the token in the fence: the mark by which that
-- waiter, and only it, may claim the grant (wait.lua, leave.lua).
local function grant(keys, last, now, owner, ttl, waiter)
  local tok = string.format('%d', math.max(last, now) + 1)
  redis.call('SET', keys[2], fence_value(tok, waiter, owner))
  -- PX, never EX: the lease must not outlive the holder's own idea of it
  -- by a second.
  redis.call('SET', keys[1], tok .. ':' .. owner, 'PX', ttl)
  return tok
end

-- pass_on frees a held lock whose token is last: it grants it to the first
-- queued waiter whose place has not lapsed and tells that waiter's
-- backend, dropping lapsed waiters on the way. With no such waiter it
-- deletes the lock and, if a backend other than the caller (self) was
-- refused the key lately without queueing, publishes the release on
-- channel (payload: the token) so that it retries now.
--
-- lease is the value "<token>:<owner>" of the lease being released, when
-- the caller has not checked that it is the current one (release.lua):
-- pass_on checks it with the calls it makes anyway. The fence, which
-- records the last grant, is swapped for the new grant's (SET ... GET) and
-- must have held this lease: then no grant was made since, and the lock
-- key holds this lease or, if it expired, nothing. Otherwise the fence is
-- put back and the waiter returned to the head of the queue. A fence that
-- does not record a lease (lost, evicted, or of an older version) is
-- checked against the lock key instead. qttl is the queue's expiry in ms,
-- renewed here once every 10 s of server time, so that a queue handed on
-- from waiter to waiter for longer than its expiry does not lapse under
-- them.
--
-- It returns 1 when the key was freed, 2 when it was handed to a waiter of
-- another backend, and "<sequence number>:<token>" when it was handed to a
-- waiter of the caller, which is not published: the caller delivers it; 0
-- when lease was not the current one and nothing changed. When the lease
-- had expired without another grant, the key still goes to the waiter but
-- the answer is negative: -2, or "-<sequence number>:<token>".
local function pass_on(keys, last, lease, channel, self, grantpfx, qttl)
  local now, now_ms
  local expired = ''
  local lapsed = {}
  while true do
    local e = redis.call('LPOP', keys[3])
    if not e then break end
    if not now then
      now = now_us()
      now_ms = math.floor(now / 1000)
    end
    -- e = "<deadline>:<ttl>:<backend id>:<seq>:<owner>"
    local a = string.find(e, ':', 1, true)
    local b = string.find(e, ':', a + 1, true)
    local c = string.find(e, ':', b + 1, true)
    local d = string.find(e, ':', c + 1, true)
    if tonumber(string.sub(e, 1, a - 1)) > now_ms then
      local backend, seq = string.sub(e, b + 1, c - 1), string.sub(e, c + 1, d - 1)
      local owner, ttl, waiter = string.sub(e, d + 1), string.sub(e, a + 1, b - 1), string.sub(e, b + 1, d - 1)
      local tok = string.format('%d', math.max(last, now) + 1)
      local old = redis.call('SET', keys[2], fence_value(tok, waiter, owner), 'GET')
      if lease and fence_lease(old) ~= lease then
        local held = redis.call('GET', keys[1])
        if held ~= lease then
          -- Not the holder: put everything back as it was, the lapsed
          -- places too (their waiters renew them where they stand), and
          -- the queue's expiry if popping it emptied, and so deleted, it.
          if old then redis.call('SET', keys[2], old) else redis.call('DEL', keys[2]) end
          local n = redis.call('LPUSH', keys[3], e)
          for i = #lapsed, 1, -1 do n = redis.call('LPUSH', keys[3], lapsed[i]) end
          if n == #lapsed + 1 then redis.call('PEXPIRE', keys[3], qttl) end
          return 0
        end
        -- Held, by a lease the fence does not record: the fence may be
        -- behind (a restore) as well as of an older version.
        local f = head(old)
        if f >= tonumber(tok) then
          tok = string.format('%d', f + 1)
          redis.call('SET', keys[2], fence_value(tok, waiter, owner))
        end
      end
      if lease and redis.call('SET', keys[1], tok .. ':' .. owner, 'PX', ttl, 'GET') ~= lease then
        expired = '-' -- the fence recorded this lease: it expired, and nobody took the key since
      elseif not lease then
        redis.call('SET', keys[1], tok .. ':' .. owner, 'PX', ttl)
      end
      if math.floor(last / 10000000) ~= math.floor(now / 10000000) and redis.call('PTTL', keys[3]) < tonumber(qttl) then
        -- Never shortened: a waiter with a longer stay set a longer one.
        redis.call('PEXPIRE', keys[3], qttl)
      end
      if backend == self then
        return expired .. seq .. ':' .. tok
      end
      -- PUBLISH's count of receivers is not checked: on a Cluster it
      -- counts only this node's subscribers. A waiter whose backend did
      -- not hear this (its subscription was down) claims the grant at its
      -- next attempt; one whose process is gone holds the key until ttl.
      redis.call('PUBLISH', grantpfx .. backend, seq .. ':' .. tok)
      if expired ~= '' then return -2 end
      return 2
    end
    lapsed[#lapsed + 1] = e
  end
  if lease and redis.call('GET', keys[1]) ~= lease then return 0 end
  redis.call('DEL', keys[1])
  -- The waiters set is left to expire: its backends may still be waiting.
  local n = redis.call('SCARD', keys[4])
  if n > 1 or (n == 1 and redis.call('SISMEMBER', keys[4], self) == 0) then
    redis.call('PUBLISH', channel, string.format('%d', last))
  end
  return 1
end

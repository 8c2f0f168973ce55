-- refresh.lua extends the lock key's expiry only if it still holds this
-- lease (same owner and token), so that a holder whose lease expired and was
-- taken over cannot extend its successor's lease.
--
-- KEYS[1]  lock key
-- ARGV[1]  the lease's value, "<token>:<owner>"
-- ARGV[2]  TTL in milliseconds
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])

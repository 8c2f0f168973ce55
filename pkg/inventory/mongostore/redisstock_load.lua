-- load: hold stock for epoch, if Redis holds an older epoch or none.
-- KEYS[1] the stock hash, KEYS[2] the sales hash.
-- ARGV[1] epoch, ARGV[2] stock.
-- Returns the epoch Redis holds afterwards.
local cur = redis.call('HGET', KEYS[1], 'epoch')
local epoch = tonumber(ARGV[1])
if cur and tonumber(cur) >= epoch then
  return tonumber(cur)
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'epoch', epoch, 'stock', tonumber(ARGV[2]), 'inflight', 0)
return epoch

-- take: admit one sale from the stock Redis holds for an epoch.
-- KEYS[1] the stock hash {epoch, stock, inflight}, KEYS[2] the sales hash.
-- ARGV[1] qty, ARGV[2] order id, ARGV[3] the sale's record (JSON, without at).
-- Returns {status, stock, epoch, inflight}: status 1 taken (stock after
-- it), 0 sold out, -1 not loaded, -2 the order id is already taken here.
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then
  return {-1, 0, 0, 0}
end
epoch = tonumber(epoch)
local stock = tonumber(redis.call('HGET', KEYS[1], 'stock'))
local inflight = tonumber(redis.call('HGET', KEYS[1], 'inflight') or 0)
local qty = tonumber(ARGV[1])
if stock < qty then
  return {0, stock, epoch, inflight}
end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return {-2, stock, epoch, inflight}
end
local t = redis.call('TIME')
local sale = cjson.decode(ARGV[3])
sale['at'] = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
sale['epoch'] = epoch
sale['qty'] = qty
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode(sale))
return {1, redis.call('HINCRBY', KEYS[1], 'stock', -qty), epoch, redis.call('HINCRBY', KEYS[1], 'inflight', qty)}

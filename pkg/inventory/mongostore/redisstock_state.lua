-- state: what Redis holds for a sku, and the age of its oldest sale.
-- KEYS[1] the stock hash, KEYS[2] the sales hash.
-- Returns {epoch, stock, inflight, oldest age in ms}, epoch -1 when not
-- loaded, age -1 with no sale; ages by this server's clock.
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then
  return {-1, 0, 0, -1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local oldest = -1
local recs = redis.call('HVALS', KEYS[2])
for i = 1, #recs do
  local age = now - cjson.decode(recs[i])['at']
  if age > oldest then
    oldest = age
  end
end
return {tonumber(epoch), tonumber(redis.call('HGET', KEYS[1], 'stock')), tonumber(redis.call('HGET', KEYS[1], 'inflight') or 0), oldest}

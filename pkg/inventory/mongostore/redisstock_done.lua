-- done: forget sales that MongoDB now holds, or whose units go back.
-- KEYS[1] the stock hash, KEYS[2] the sales hash.
-- ARGV[1] epoch, ARGV[2] 1 to give the units back to the stock, 0 not;
-- ARGV[3..] order ids.
-- Only the sales still recorded at that epoch count: a reload dropped the
-- others, and its stock already counts them as it should.
-- Returns the number of units released.
local epoch = tonumber(ARGV[1])
local cur = redis.call('HGET', KEYS[1], 'epoch')
if not cur or tonumber(cur) ~= epoch then
  return 0
end
local units = 0
for i = 3, #ARGV do
  local rec = redis.call('HGET', KEYS[2], ARGV[i])
  if rec then
    local sale = cjson.decode(rec)
    if sale['epoch'] == epoch then
      units = units + sale['qty']
    end
    redis.call('HDEL', KEYS[2], ARGV[i])
  end
end
if units > 0 then
  redis.call('HINCRBY', KEYS[1], 'inflight', -units)
  if ARGV[2] == '1' then
    redis.call('HINCRBY', KEYS[1], 'stock', units)
  end
end
return units

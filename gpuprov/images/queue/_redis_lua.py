"""Lua scripts of the Redis queue; each runs atomically on the server (one transaction).

KEYS, in this order for every script: 1 stream, 2 task (hash id -> {"shard","payload"} JSON),
3 state (hash id -> state), 4 attempts (hash id -> claims), 5 owner (hash id -> worker),
6 leases (zset id -> lease expiry, ms of server time), 7 counts (hash state -> n),
8 result (hash id -> row JSON), 9 done (zset id by shard), 10 failure (hash id -> reason),
11 failed (zset id by shard), 12 shard counter, 13 solo (set of ids leased alone in their claim).
The stream entry of a task is ``<shard>-1``; its consumer-group PEL entry is the delivery record.
"""

from __future__ import annotations

KEY_NAMES = (
    "stream",
    "task",
    "state",
    "attempts",
    "owner",
    "leases",
    "counts",
    "result",
    "done",
    "failure",
    "failed",
    "shard",
    "solo",
)

_COMMON = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function move(id, from, to)
  redis.call('HINCRBY', KEYS[7], from, -1)
  redis.call('HINCRBY', KEYS[7], to, 1)
  redis.call('HSET', KEYS[3], id, to)
end
local function shard_of(id)
  return cjson.decode(redis.call('HGET', KEYS[2], id))['shard']
end
local function retire(id, group)
  -- leave the consumer group's PEL and the lease set (task is done, failed or dead)
  local eid = shard_of(id) .. '-1'
  redis.call('XACK', KEYS[1], group, eid)
  redis.call('XDEL', KEYS[1], eid)
  redis.call('ZREM', KEYS[6], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('SREM', KEYS[13], id)
end
local function bury(id, state, reason, group)
  retire(id, group)
  redis.call('HSET', KEYS[10], id, reason)
  redis.call('ZADD', KEYS[11], shard_of(id), id)
end
"""

# ARGV: group, then payload pairs (id, task JSON without shard)
SUBMIT = (
    _COMMON
    + """
local new = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HEXISTS', KEYS[3], id) == 0 then
    local shard = redis.call('INCR', KEYS[12]) - 1
    redis.call('HSET', KEYS[2], id, '{"shard":' .. shard .. ',"payload":' .. ARGV[i + 1] .. '}')
    redis.call('HSET', KEYS[3], id, 'pending')
    redis.call('HINCRBY', KEYS[7], 'pending', 1)
    redis.call('XADD', KEYS[1], shard .. '-1', 'id', id)
    new = new + 1
  end
end
return new
"""
)

# ARGV: group, worker, k, lease_ms, max_attempts. Returns flat {id, task JSON, attempts, ...}.
CLAIM = (
    _COMMON
    + """
local group, worker = ARGV[1], ARGV[2]
local k, lease, maxa = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local out, n = {}, 0
local function take(id)
  local a = redis.call('HINCRBY', KEYS[4], id, 1)
  redis.call('ZADD', KEYS[6], now + lease, id)
  redis.call('HSET', KEYS[5], id, worker)
  move(id, redis.call('HGET', KEYS[3], id), 'leased')
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id)
  out[#out + 1] = a
  n = n + 1
end
local function xclaim(id, a)
  -- moves the PEL entry to this worker
  redis.call('XCLAIM', KEYS[1], group, worker, 0, shard_of(id) .. '-1', 'RETRYCOUNT', a + 1, 'JUSTID')
end
-- an expired lease (its worker died or stalled holding it, perhaps because of it) is handed out alone,
-- before anything else; it is dead once a lease it held alone expired after its last attempt
while true do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[6], 1, now, 'LIMIT', 0, 1)
  if #ids == 0 then break end
  local id = ids[1]
  local a = tonumber(redis.call('HGET', KEYS[4], id) or '0')
  if redis.call('SISMEMBER', KEYS[13], id) == 1 and a >= maxa then
    local holder = redis.call('HGET', KEYS[5], id) or '?'
    bury(id, 'dead', 'lease of worker ' .. holder .. ' expired after ' .. a .. ' of ' .. maxa ..
         ' attempts, the last one alone in its claim', group)
    move(id, 'leased', 'dead')
  else
    xclaim(id, a)
    take(id)
    redis.call('SADD', KEYS[13], id)
    return out
  end
end
-- then retried tasks (lease score 0)
while n < k do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[6], 0, 0, 'LIMIT', 0, k - n)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    local a = tonumber(redis.call('HGET', KEYS[4], id) or '0')
    if a >= maxa then
      bury(id, 'dead', 'retried after ' .. a .. ' of ' .. maxa .. ' attempts', group)
      move(id, 'pending', 'dead')
    else
      xclaim(id, a)
      take(id)
    end
  end
end
-- then new entries, in stream (= shard) order
if n < k then
  local res = redis.call('XREADGROUP', 'GROUP', group, worker, 'COUNT', k - n, 'STREAMS', KEYS[1], '>')
  if res then
    for _, entry in ipairs(res[1][2]) do take(entry[2][2]) end
  end
end
-- alone in its claim: a crash of its worker is charged to it alone
if n == 1 then
  redis.call('SADD', KEYS[13], out[1])
else
  for i = 1, #out, 3 do redis.call('SREM', KEYS[13], out[i]) end
end
return out
"""
)

# ARGV: group, worker, lease_ms, ids...
EXTEND = (
    _COMMON
    + """
local group, worker, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local expires = now_ms() + lease
for i = 4, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[3], id) == 'leased' and redis.call('HGET', KEYS[5], id) == worker then
    redis.call('ZADD', KEYS[6], 'XX', expires, id)
    redis.call('XCLAIM', KEYS[1], group, worker, 0, shard_of(id) .. '-1', 'JUSTID')
  end
end
return 0
"""
)

# ARGV: group, then pairs (id, row JSON). Returns rows newly recorded, or an error naming unknown ids.
COMPLETE = (
    _COMMON
    + """
local group = ARGV[1]
for i = 2, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then return redis.error_reply('UNKNOWN ' .. ARGV[i]) end
end
local new = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HSETNX', KEYS[8], id, ARGV[i + 1]) == 1 then
    local st = redis.call('HGET', KEYS[3], id)
    retire(id, group)
    redis.call('HDEL', KEYS[10], id)
    redis.call('ZREM', KEYS[11], id)
    redis.call('ZADD', KEYS[9], shard_of(id), id)
    move(id, st, 'done')
    new = new + 1
  end
end
return new
"""
)

# ARGV: group, worker, id, reason, retry (0/1), max_attempts
FAIL = (
    _COMMON
    + """
local group, worker, id, reason = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local retry, maxa = ARGV[5] == '1', tonumber(ARGV[6])
local st = redis.call('HGET', KEYS[3], id)
if not st then return redis.error_reply('UNKNOWN ' .. id) end
if st ~= 'leased' or redis.call('HGET', KEYS[5], id) ~= worker then return 0 end
local a = tonumber(redis.call('HGET', KEYS[4], id) or '0')
if not retry then
  bury(id, 'failed', reason, group)
  move(id, st, 'failed')
elseif a >= maxa then
  bury(id, 'dead', reason .. ' (after ' .. a .. ' of ' .. maxa .. ' attempts)', group)
  move(id, st, 'dead')
else
  -- stays in the PEL; lease score 0 makes it claimable at once
  redis.call('ZADD', KEYS[6], 0, id)
  redis.call('HDEL', KEYS[5], id)
  move(id, st, 'pending')
end
return 1
"""
)

# ARGV: group, n_states, states..., ids... (none: every failed or dead task in those states). Returns tasks moved.
RETRY = (
    _COMMON
    + """
local n = tonumber(ARGV[2])
local wanted = {}
for i = 3, 2 + n do wanted[ARGV[i]] = true end
local ids = {}
for i = 3 + n, #ARGV do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then return redis.error_reply('UNKNOWN ' .. ARGV[i]) end
  ids[#ids + 1] = ARGV[i]
end
if #ARGV < 3 + n then ids = redis.call('ZRANGE', KEYS[11], 0, -1) end
local moved = 0
for _, id in ipairs(ids) do
  local st = redis.call('HGET', KEYS[3], id)
  if wanted[st] then
    redis.call('ZREM', KEYS[11], id)
    redis.call('HDEL', KEYS[10], id)
    redis.call('HSET', KEYS[4], id, 0)
    redis.call('SREM', KEYS[13], id)
    -- lease score 0: claimed like a retried task (its stream entry was removed when it failed)
    redis.call('ZADD', KEYS[6], 0, id)
    move(id, st, 'pending')
    moved = moved + 1
  end
end
return moved
"""
)

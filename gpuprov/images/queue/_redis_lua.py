"""Lua scripts of the Redis queue; each runs atomically on the server (one transaction).

KEYS, in this order for every script: 1 stream, 2 task (hash id -> {"shard","payload"} JSON),
3 state (hash id -> state), 4 attempts (hash id -> claims), 5 lease_of (hash id -> lease id, while held),
6 lease_exp (zset lease id -> expiry, ms of server time), 7 counts (hash state -> n),
8 result (hash id -> row JSON), 9 done (zset id by shard), 10 failure (hash id -> reason),
11 failed (zset id by shard), 12 shard counter, 13 lease_info (hash ``<lease>:w`` worker, ``<lease>:n`` tasks
still held, ``<lease>:s`` 1 if claimed alone, ``<lease>:ids`` the claimed ids, space-separated),
14 expired (zset id by shard: freed from an expired lease, waiting to be claimed alone; state stays leased),
15 requeued (zset id by shard: retried, state pending), 16 lease counter, 17 layout version.
The stream entry of a task is ``<shard>-1``; its consumer-group PEL entry is the delivery record.
A lease is one claimed batch: its tasks point at it (``lease_of``), extending it is one ``ZADD``, and an expired
one frees all its tasks at once.
"""

from __future__ import annotations

KEY_NAMES = (
    "stream",
    "task",
    "state",
    "attempts",
    "lease_of",
    "lease_exp",
    "counts",
    "result",
    "done",
    "failure",
    "failed",
    "shard",
    "lease_info",
    "expired",
    "requeued",
    "lease_seq",
    "layout",
)
LAYOUT = 2
"""The key layout these scripts use. Layout 1 (gpuprov before batch leases: a lease per task in ``leases``,
its worker in ``owner``, ``solo`` a set) is converted by :data:`OPEN`."""

_COMMON = """
local CHUNK = 1000  -- even: HSET and ZADD take pairs
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- state changes; the counts hash is written once per state by counted() (every script returns through it)
local delta = {}
local function move(id, from, to)
  delta[from] = (delta[from] or 0) - 1
  delta[to] = (delta[to] or 0) + 1
  redis.call('HSET', KEYS[3], id, to)
end
local function counted(reply)
  for state, n in pairs(delta) do
    if n ~= 0 then redis.call('HINCRBY', KEYS[7], state, n) end
  end
  return reply
end
local function shard_in(record)
  -- a task record starts {"shard":N, (SUBMIT writes it so)
  return tonumber(string.match(record, '^{"shard":(%d+),'))
end
local function shard_of(id)
  return shard_in(redis.call('HGET', KEYS[2], id))
end
-- one call per CHUNK arguments (Lua's unpack has a limit)
local function many(cmd, key, args)
  for i = 1, #args, CHUNK do
    redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
  end
end
-- the values of fields ids of hash key, in order (false for a missing one), one HMGET per CHUNK ids
local function hmget(key, ids)
  local out = {}
  for i = 1, #ids, CHUNK do
    local part = redis.call('HMGET', key, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end
local function new_lease(worker, expires, solo, ids)
  local lease = redis.call('INCR', KEYS[16])
  redis.call('ZADD', KEYS[6], expires, lease)
  redis.call('HSET', KEYS[13], lease .. ':w', worker, lease .. ':n', #ids, lease .. ':s', solo,
             lease .. ':ids', table.concat(ids, ' '))
  local pairs_ = {}
  for _, id in ipairs(ids) do pairs_[#pairs_ + 1] = id; pairs_[#pairs_ + 1] = lease end
  many('HSET', KEYS[5], pairs_)
  return lease
end
local function drop_lease(lease)
  redis.call('ZREM', KEYS[6], lease)
  redis.call('HDEL', KEYS[13], lease .. ':w', lease .. ':n', lease .. ':s', lease .. ':ids')
end
-- the tasks leave their leases (done, failed, retried); a lease goes with its last task
local function leave(ids)
  local held, per = {}, {}
  local leases = hmget(KEYS[5], ids)
  for i, id in ipairs(ids) do
    local lease = leases[i]
    if lease then
      held[#held + 1] = id
      per[lease] = (per[lease] or 0) + 1
    end
  end
  many('HDEL', KEYS[5], held)
  for lease, n in pairs(per) do
    if redis.call('HINCRBY', KEYS[13], lease .. ':n', -n) <= 0 then drop_lease(lease) end
  end
end
-- the worker holding the task's live (perhaps expired, not yet freed) lease, or false
local function holder(id)
  local lease = redis.call('HGET', KEYS[5], id)
  return lease and redis.call('HGET', KEYS[13], lease .. ':w')
end
local function retire(ids, group, shards)
  -- leave the consumer group's PEL and the stream (tasks done, failed or dead); shards: theirs, if known
  leave(ids)
  many('ZREM', KEYS[14], ids)
  many('ZREM', KEYS[15], ids)
  local eids = {}
  for i, id in ipairs(ids) do eids[#eids + 1] = (shards and shards[i] or shard_of(id)) .. '-1' end
  for i = 1, #eids, CHUNK do
    local part = {unpack(eids, i, math.min(i + CHUNK - 1, #eids))}
    redis.call('XACK', KEYS[1], group, unpack(part))
    redis.call('XDEL', KEYS[1], unpack(part))
  end
end
local function bury(id, state, reason, group)
  retire({id}, group)
  redis.call('HSET', KEYS[10], id, reason)
  redis.call('ZADD', KEYS[11], shard_of(id), id)
  move(id, redis.call('HGET', KEYS[3], id), state)
end
"""

# KEYS: the 17 above, then layout 1's 18 leases, 19 owner, 20 solo. ARGV: group, LAYOUT.
# Sets the layout of a new queue, converts one of layout 1; returns the layout it finds otherwise.
OPEN = (
    _COMMON
    + """
local layout = redis.call('GET', KEYS[17])
if layout then return tonumber(layout) end
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- layout 1: a lease per task (score 0: retried), its worker in <stream>:owner, claimed alone in <stream>:solo
  local held = redis.call('ZRANGE', KEYS[18], 0, -1, 'WITHSCORES')
  for i = 1, #held, 2 do
    local id, expires = held[i], tonumber(held[i + 1])
    if expires == 0 then
      redis.call('ZADD', KEYS[15], shard_of(id), id)
    else
      local solo = redis.call('SISMEMBER', KEYS[20], id)
      new_lease(redis.call('HGET', KEYS[19], id) or '?', expires, solo, {id})
    end
  end
  redis.call('DEL', KEYS[18], KEYS[19], KEYS[20])
end
redis.call('SET', KEYS[17], ARGV[2])
return tonumber(ARGV[2])
"""
)

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
    redis.call('XADD', KEYS[1], shard .. '-1', 'id', id)
    new = new + 1
  end
end
redis.call('HINCRBY', KEYS[7], 'pending', new)
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
local out, ids = {}, {}
local function take(id, xclaim)
  local a = redis.call('HINCRBY', KEYS[4], id, 1)
  if xclaim then  -- moves the PEL entry to this worker
    redis.call('XCLAIM', KEYS[1], group, worker, 0, shard_of(id) .. '-1', 'RETRYCOUNT', a, 'JUSTID')
  end
  move(id, redis.call('HGET', KEYS[3], id), 'leased')
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id)
  out[#out + 1] = a
  ids[#ids + 1] = id
end
-- free every expired lease: all its tasks at once; dead, a task claimed alone that used its last attempt
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)) do
  local who = redis.call('HGET', KEYS[13], gone .. ':w') or '?'
  local solo = redis.call('HGET', KEYS[13], gone .. ':s') == '1'
  for id in string.gmatch(redis.call('HGET', KEYS[13], gone .. ':ids') or '', '%S+') do
    if redis.call('HGET', KEYS[5], id) == gone then
      redis.call('HDEL', KEYS[5], id)
      local a = tonumber(redis.call('HGET', KEYS[4], id) or '0')
      if solo and a >= maxa then
        bury(id, 'dead', 'lease of worker ' .. who .. ' expired after ' .. a .. ' of ' .. maxa ..
             ' attempts, the last one alone in its claim', group)
      else
        redis.call('ZADD', KEYS[14], shard_of(id), id)
      end
    end
  end
  drop_lease(gone)
end
-- a task of an expired lease (its worker died or stalled holding it, perhaps because of it) goes alone
local first = redis.call('ZRANGE', KEYS[14], 0, 0)
if #first == 1 then
  redis.call('ZREM', KEYS[14], first[1])
  take(first[1], true)
else
  -- retried tasks, then new entries in stream (= shard) order
  while #ids < k do
    local back = redis.call('ZRANGE', KEYS[15], 0, k - #ids - 1)
    if #back == 0 then break end
    for _, id in ipairs(back) do
      redis.call('ZREM', KEYS[15], id)
      local a = tonumber(redis.call('HGET', KEYS[4], id) or '0')
      if a >= maxa then
        bury(id, 'dead', 'retried after ' .. a .. ' of ' .. maxa .. ' attempts', group)
      else
        take(id, true)
      end
    end
  end
  if #ids < k then
    -- never delivered, so pending and never claimed: their first attempt, written for the batch at once
    local res = redis.call('XREADGROUP', 'GROUP', group, worker, 'COUNT', k - #ids, 'STREAMS', KEYS[1], '>')
    local fresh, firsts, leased = {}, {}, {}
    for _, entry in ipairs(res and res[1][2] or {}) do fresh[#fresh + 1] = entry[2][2] end
    local records = hmget(KEYS[2], fresh)
    for i, id in ipairs(fresh) do
      firsts[#firsts + 1] = id
      firsts[#firsts + 1] = 1
      leased[#leased + 1] = id
      leased[#leased + 1] = 'leased'
      out[#out + 1] = id
      out[#out + 1] = records[i]
      out[#out + 1] = 1
      ids[#ids + 1] = id
    end
    many('HSET', KEYS[4], firsts)
    many('HSET', KEYS[3], leased)
    delta['pending'] = (delta['pending'] or 0) - #fresh
    delta['leased'] = (delta['leased'] or 0) + #fresh
  end
end
if #ids > 0 then new_lease(worker, now + lease, #ids == 1 and 1 or 0, ids) end
return counted(out)
"""
)

# ARGV: group, worker, lease_ms, ids (no repeats)...
EXTEND = (
    _COMMON
    + """
local worker, lease = ARGV[2], tonumber(ARGV[3])
local expires = now_ms() + lease
local named, order = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local held = redis.call('HGET', KEYS[5], id)
  if held and redis.call('HGET', KEYS[13], held .. ':w') == worker then
    if not named[held] then named[held] = {}; order[#order + 1] = held end
    table.insert(named[held], id)
  end
end
for _, held in ipairs(order) do
  local ids = named[held]
  if #ids == tonumber(redis.call('HGET', KEYS[13], held .. ':n')) then
    redis.call('ZADD', KEYS[6], 'XX', expires, held)
  else  -- part of the lease: those tasks move to a lease of their own
    redis.call('HINCRBY', KEYS[13], held .. ':n', -#ids)
    new_lease(worker, expires, redis.call('HGET', KEYS[13], held .. ':s'), ids)
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
local named = {}
for i = 2, #ARGV, 2 do named[#named + 1] = ARGV[i] end
local states = hmget(KEYS[3], named)
for i = 1, #named do
  if not states[i] then return redis.error_reply('UNKNOWN ' .. named[i]) end
end
local rows, ids, was, seen = {}, {}, {}, {}
for i = 1, #named do
  local id, st = named[i], states[i]
  if st ~= 'done' and not seen[id] then
    seen[id] = true
    rows[#rows + 1] = id
    rows[#rows + 1] = ARGV[2 * i + 1]
    ids[#ids + 1] = id
    was[#ids] = st
  end
end
local records = hmget(KEYS[2], ids)
local shards, by_shard, done = {}, {}, {}
for i, id in ipairs(ids) do
  shards[i] = shard_in(records[i])
  by_shard[#by_shard + 1] = shards[i]
  by_shard[#by_shard + 1] = id
  done[#done + 1] = id
  done[#done + 1] = 'done'
  if was[i] == 'failed' or was[i] == 'dead' then
    redis.call('HDEL', KEYS[10], id)
    redis.call('ZREM', KEYS[11], id)
  end
  delta[was[i]] = (delta[was[i]] or 0) - 1
end
delta['done'] = (delta['done'] or 0) + #ids
many('HSET', KEYS[3], done)
retire(ids, group, shards)
many('HSET', KEYS[8], rows)
many('ZADD', KEYS[9], by_shard)
return counted(#ids)
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
if st ~= 'leased' or holder(id) ~= worker then return 0 end
local a = tonumber(redis.call('HGET', KEYS[4], id) or '0')
if not retry then
  bury(id, 'failed', reason, group)
elseif a >= maxa then
  bury(id, 'dead', reason .. ' (after ' .. a .. ' of ' .. maxa .. ' attempts)', group)
else
  -- stays in the PEL; the next claim takes it before new entries
  leave({id})
  redis.call('ZADD', KEYS[15], shard_of(id), id)
  move(id, st, 'pending')
end
return counted(1)
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
    -- claimed like a retried task (its stream entry was removed when it failed)
    redis.call('ZADD', KEYS[15], shard_of(id), id)
    move(id, st, 'pending')
    moved = moved + 1
  end
end
return counted(moved)
"""
)

"""The Redis backend's Lua scripts: each queue operation is one script, so it is atomic on the
server (no other client's command runs in between) and reads the server's clock.

Keys (P = the prefix, passed as KEYS[1]; one Redis server, not Redis Cluster):
  P..'job:'..id            hash: the job's fields; absent field = None (`progress`: set by
                           RENEW and FINISH's requeue, removed when the job ends)
  P..'batch:'..id          hash: the batch's fields and counters; 'event:'..type marks a recorded event
  P..'batch:'..id..':jobs' list: job ids in index order
  P..'batches:'..S        sorted set of the tenant's batch ids in the account, score = created_at
  P..'batch_keys'          hash: account .. '\\0' .. scoped client key -> batch id (idempotent enqueue)
  P..'ready'               sorted set of queued jobs, score = priority * 1e12 + enqueue sequence
  P..'delayed'             sorted set of queued jobs waiting for a retry delay, score = available_at
  P..'leased'              sorted set of running jobs, score = lease_expires_at
  P..'sub:'..id, P..'subs:'..S              subscriptions
  P..'event:'..id, P..'delivery:'..id       events and deliveries (the outbox)
  P..'deliveries_due'      sorted set of pending deliveries, score = next_at
  P..'dead:'..S            list of dead-lettered delivery ids
  P..'file:'..id, P..'files:'..S            uploaded files (redis_queue.py writes them, no script)
S = scope(tenant, account): the account in the tenant's namespace (tandem.asyncq.job.scoped: the
account itself for the anonymous tenant, so keys stored before tenants still name theirs). Batch,
file, subscription, event and delivery hashes carry a 'tenant' field (absent: anonymous);
readers check it too.
Scores stay exact below 2^53: |priority| <= 1000 (checked by enqueue) and < 1e12 enqueues.
"""

from __future__ import annotations

from tandem.asyncq.event import EventType

_COMMON = """
local P = KEYS[1]
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end
-- Lua 5.1 would pass a number to Redis with 14 significant digits; these keep all 17
local function num(x)
  return string.format('%%.17g', x)
end
local function rank(jk)
  local j = redis.call('HMGET', jk, 'priority', 'seq')
  return num(tonumber(j[1]) * 1e12 + tonumber(j[2]))
end
local function hgetall(key)
  return redis.call('HGETALL', key)
end
-- a hash's tenant field ('' when absent: stored before tenants were)
local function tenant_of(v)
  if v then return v end
  return ''
end
local function scope(tenant, account)
  if tenant == '' then return account end
  return tenant .. '\\31' .. account
end
local function record_event(etype, batch_id, account, model, tenant, payload, t)
  if redis.call('HSETNX', P .. 'batch:' .. batch_id, 'event:' .. etype, '1') == 0 then return end
  local eid = batch_id .. '.' .. etype
  redis.call('HSET', P .. 'event:' .. eid, 'id', eid, 'type', etype, 'batch_id', batch_id,
             'account', account, 'model', model, 'payload', payload, 'created_at', num(t),
             'tenant', tenant)
  for _, sid in ipairs(redis.call('SMEMBERS', P .. 'subs:' .. scope(tenant, account))) do
    local s = redis.call('HMGET', P .. 'sub:' .. sid, 'event_types', 'url', 'secret', 'tenant', 'account')
    if s[1] and tenant_of(s[4]) == tenant and s[5] == account and
        string.find(',' .. s[1] .. ',', ',' .. etype .. ',', 1, true) then
      local did = eid .. '/' .. sid
      redis.call('HSET', P .. 'delivery:' .. did, 'id', did, 'event_id', eid,
                 'subscription_id', sid, 'account', account, 'url', s[2], 'secret', s[3],
                 'status', 'pending', 'attempts', 0, 'next_at', num(t), 'tenant', tenant)
      redis.call('ZADD', P .. 'deliveries_due', num(t), did)
    end
  end
end
local function count_terminal(batch_id, field, k, t)
  local bk = P .. 'batch:' .. batch_id
  if k > 0 then redis.call('HINCRBY', bk, field, k) end
  local b = redis.call('HMGET', bk, 'total', 'succeeded', 'failed', 'cancelled', 'account', 'model',
                       'tenant')
  local total, s, f, c = tonumber(b[1]), tonumber(b[2]), tonumber(b[3]), tonumber(b[4])
  if s + f + c == total then
    local etype = '%(FAILED)s'
    if f == 0 and c == 0 then etype = '%(SUCCEEDED)s' end
    record_event(etype, batch_id, b[5], b[6], tenant_of(b[7]), cjson.encode({requestId = batch_id,
                 total = total, succeeded = s, failed = f, cancelled = c}), t)
  end
end
local function current(id, owner, attempt, t)
  local j = redis.call('HMGET', P .. 'job:' .. id, 'status', 'owner', 'attempts', 'lease_expires_at')
  return j[1] == 'running' and j[2] == owner and tonumber(j[3]) == attempt and tonumber(j[4]) > t
end
""" % {"FAILED": EventType.FAILED.value, "SUCCEEDED": EventType.SUCCEEDED.value}

# ARGV: batch_id, account, model, key (scoped by the tenant; '' = none), priority, meta,
# max_attempts, jobs JSON ([{id, body, ext}]), tenant -> {batch hash, created 0|1} (the caller
# checks an existing batch's tenant: job.scoped is not injective)
ENQUEUE = _COMMON + """
local batch_id, account, model, key, tenant = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[9]
local priority, max_attempts = tonumber(ARGV[5]), tonumber(ARGV[7])
if key ~= '' then
  local existing = redis.call('HGET', P .. 'batch_keys', account .. '\\0' .. key)
  if existing then return {hgetall(P .. 'batch:' .. existing), 0} end
  redis.call('HSET', P .. 'batch_keys', account .. '\\0' .. key, batch_id)
end
local jobs = cjson.decode(ARGV[8])
local t = now()
local bk = P .. 'batch:' .. batch_id
redis.call('HSET', bk, 'id', batch_id, 'account', account, 'model', model, 'key', key,
           'priority', priority, 'created_at', num(t), 'total', #jobs, 'succeeded', 0, 'failed', 0,
           'cancelled', 0, 'meta', ARGV[6], 'tenant', tenant)
redis.call('ZADD', P .. 'batches:' .. scope(tenant, account), num(t), batch_id)
for i, j in ipairs(jobs) do
  local jk = P .. 'job:' .. j.id
  local seq = redis.call('INCR', P .. 'seq')
  redis.call('HSET', jk, 'id', j.id, 'batch_id', batch_id, 'idx', i - 1, 'account', account,
             'model', model, 'priority', priority, 'body', j.body, 'status', 'queued',
             'attempts', 0, 'max_attempts', max_attempts, 'created_at', num(t), 'seq', seq)
  if j.ext ~= cjson.null then redis.call('HSET', jk, 'external_reference', j.ext) end
  redis.call('RPUSH', bk .. ':jobs', j.id)
  redis.call('ZADD', P .. 'ready', num(priority * 1e12 + seq), j.id)
end
record_event('%(QUEUED)s', batch_id, account, model, tenant, cjson.encode({requestId = batch_id}), t)
if #jobs == 0 then count_terminal(batch_id, 'succeeded', 0, t) end
return {hgetall(bk), 1}
""" % {"QUEUED": EventType.QUEUED.value}

# ARGV: n, owner, lease_s -> list of job hashes (now RUNNING under owner)
TAKE = _COMMON + """
local n, owner, lease_s = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local t = now()
local spent = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'leased', '-inf', num(t))) do
  local jk = P .. 'job:' .. id
  redis.call('ZREM', P .. 'leased', id)
  redis.call('HDEL', jk, 'owner', 'lease_expires_at')
  local j = redis.call('HMGET', jk, 'attempts', 'max_attempts', 'batch_id')
  if tonumber(j[1]) >= tonumber(j[2]) then
    redis.call('HDEL', jk, 'progress')
    redis.call('HSET', jk, 'status', 'failed', 'finished_at', num(t), 'error',
               cjson.encode({message = 'lease expired on the last attempt', type = 'lease_expired'}))
    spent[j[3]] = (spent[j[3]] or 0) + 1
  else
    redis.call('HSET', jk, 'status', 'queued')
    redis.call('ZADD', P .. 'ready', rank(jk), id)
  end
end
for batch_id, k in pairs(spent) do count_terminal(batch_id, 'failed', k, t) end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'delayed', '-inf', num(t))) do
  redis.call('ZREM', P .. 'delayed', id)
  redis.call('ZADD', P .. 'ready', rank(P .. 'job:' .. id), id)
end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', P .. 'ready', 0, n - 1)) do
  local jk = P .. 'job:' .. id
  redis.call('ZREM', P .. 'ready', id)
  redis.call('HINCRBY', jk, 'attempts', 1)
  redis.call('HSET', jk, 'status', 'running', 'owner', owner, 'lease_expires_at', num(t + lease_s),
             'started_at', num(t))
  redis.call('ZADD', P .. 'leased', num(t + lease_s), id)
  table.insert(out, hgetall(jk))
end
return out
"""

# ARGV: job_id, owner, attempt, lease_s, progress JSON ('' = keep) -> new expiry (string) or nil
RENEW = _COMMON + """
local id, lease_s = ARGV[1], tonumber(ARGV[4])
local t = now()
if not current(id, ARGV[2], tonumber(ARGV[3]), t) then return false end
redis.call('HSET', P .. 'job:' .. id, 'lease_expires_at', num(t + lease_s))
if ARGV[5] ~= '' then redis.call('HSET', P .. 'job:' .. id, 'progress', ARGV[5]) end
redis.call('ZADD', P .. 'leased', num(t + lease_s), id)
return num(t + lease_s)
"""

# ARGV: job_id, owner, attempt, mode (complete|fail|requeue), payload JSON, retryable 0|1,
# delay_s (fail: the retry's; requeue: its own), progress JSON ('' = keep; requeue only) -> the
# new status, or nil if the lease is not current
FINISH = _COMMON + """
local id, mode, payload = ARGV[1], ARGV[4], ARGV[5]
local t = now()
if not current(id, ARGV[2], tonumber(ARGV[3]), t) then return false end
local jk = P .. 'job:' .. id
redis.call('ZREM', P .. 'leased', id)
redis.call('HDEL', jk, 'owner', 'lease_expires_at')
local j = redis.call('HMGET', jk, 'batch_id', 'attempts', 'max_attempts')
if mode == 'complete' then
  redis.call('HDEL', jk, 'progress')
  redis.call('HSET', jk, 'status', 'succeeded', 'result', payload, 'finished_at', num(t))
  count_terminal(j[1], 'succeeded', 1, t)
  return 'succeeded'
elseif mode == 'requeue' then
  if ARGV[8] ~= '' then redis.call('HSET', jk, 'progress', ARGV[8]) end
  redis.call('HINCRBY', jk, 'attempts', -1)
  redis.call('HSET', jk, 'status', 'queued')
  local delay = tonumber(ARGV[7])
  if delay > 0 then redis.call('ZADD', P .. 'delayed', num(t + delay), id)
  else redis.call('ZADD', P .. 'ready', rank(jk), id) end
  return 'queued'
end
redis.call('HSET', jk, 'error', payload)
if ARGV[6] == '1' and tonumber(j[2]) < tonumber(j[3]) then
  redis.call('HSET', jk, 'status', 'queued')
  local delay = tonumber(ARGV[7])
  if delay > 0 then redis.call('ZADD', P .. 'delayed', num(t + delay), id)
  else redis.call('ZADD', P .. 'ready', rank(jk), id) end
  return 'queued'
end
redis.call('HDEL', jk, 'progress')
redis.call('HSET', jk, 'status', 'failed', 'finished_at', num(t))
count_terminal(j[1], 'failed', 1, t)
return 'failed'
"""

# ARGV: batch_id, tenant -> how many jobs were cancelled (0: not that tenant's batch)
CANCEL = _COMMON + """
local batch_id = ARGV[1]
local b = redis.call('HMGET', P .. 'batch:' .. batch_id, 'id', 'tenant')
if not b[1] or tenant_of(b[2]) ~= ARGV[2] then return 0 end
local t = now()
local k = 0
for _, id in ipairs(redis.call('LRANGE', P .. 'batch:' .. batch_id .. ':jobs', 0, -1)) do
  local jk = P .. 'job:' .. id
  local status = redis.call('HGET', jk, 'status')
  if status == 'queued' or status == 'running' then
    redis.call('ZREM', P .. 'ready', id)
    redis.call('ZREM', P .. 'delayed', id)
    redis.call('ZREM', P .. 'leased', id)
    redis.call('HDEL', jk, 'owner', 'lease_expires_at', 'progress')
    redis.call('HSET', jk, 'status', 'cancelled', 'finished_at', num(t))
    k = k + 1
  end
end
if k > 0 then count_terminal(batch_id, 'cancelled', k, t) end
return k
"""

# ARGV: n, lease_s -> list of {delivery hash, event hash}
TAKE_DELIVERIES = _COMMON + """
local n, lease_s = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = now()
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'deliveries_due', '-inf', num(t), 'LIMIT', 0, n)) do
  local dk = P .. 'delivery:' .. id
  redis.call('HINCRBY', dk, 'attempts', 1)
  redis.call('HSET', dk, 'next_at', num(t + lease_s))
  redis.call('ZADD', P .. 'deliveries_due', num(t + lease_s), id)
  local eid = redis.call('HGET', dk, 'event_id')
  table.insert(out, {hgetall(dk), hgetall(P .. 'event:' .. eid)})
end
return out
"""

# ARGV: delivery_id, attempts, status (delivered|pending|dead), error ('' = none), retry_in_s
FINISH_DELIVERY = _COMMON + """
local id, status = ARGV[1], ARGV[3]
local dk = P .. 'delivery:' .. id
local d = redis.call('HMGET', dk, 'status', 'attempts', 'account', 'tenant')
if d[1] ~= 'pending' or tonumber(d[2]) ~= tonumber(ARGV[2]) then return 0 end
local t = now()
redis.call('HSET', dk, 'status', status)
if ARGV[4] ~= '' then redis.call('HSET', dk, 'last_error', ARGV[4]) end
if status == 'pending' then
  redis.call('HSET', dk, 'next_at', num(t + tonumber(ARGV[5])))
  redis.call('ZADD', P .. 'deliveries_due', num(t + tonumber(ARGV[5])), id)
else
  redis.call('HSET', dk, 'next_at', num(t))
  redis.call('ZREM', P .. 'deliveries_due', id)
  if status == 'dead' then redis.call('RPUSH', P .. 'dead:' .. scope(tenant_of(d[4]), d[3]), id) end
end
return 1
"""

import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';

/**
 * Lua scripts of the Redis store: every multi-key change is one script, so it is atomic.
 *
 * Calling convention: ARGV[1] = key prefix, ARGV[2] = the store's clock (ms), then each script's
 * own arguments, read in order with `arg()`. Time always comes from the caller's clock, never
 * Redis TIME, so an injected clock drives leases and rate limits. Scripts compute their keys
 * from the prefix (so they do not run on Redis Cluster; one primary, with replicas, is the
 * deployment we support).
 *
 * Records are hashes with one field per top-level property holding its JSON encoding, so a
 * patch is an HSET and no script ever re-encodes JSON (cjson would turn `[]` into `{}` and round
 * numbers). Fields starting with `_` are index bookkeeping, not record properties.
 */
const PRELUDE = `
local P = ARGV[1]
local NOW = tonumber(ARGV[2])
local argi = 3
local function arg() local v = ARGV[argi]; argi = argi + 1; return v end
local function argn() return tonumber(arg()) end
local function argfields()
  local n = argn()
  local out = {}
  for i = 1, n * 2 do out[i] = arg() end
  return out
end
local function argjobs()
  local n = argn()
  local jobs = {}
  for i = 1, n do
    local q = arg(); local id = arg(); local payload = arg(); local runAt = arg()
    jobs[i] = { q, id, payload, tonumber(runAt) }
  end
  return jobs
end
local function hset_fields(key, fields)
  if #fields > 0 then redis.call('HSET', key, unpack(fields)) end
end
local notified = {}
local function notify(queue)
  if not notified[queue] then
    notified[queue] = true
    redis.call('PUBLISH', P .. 'notify:' .. queue, '1')
  end
end
-- A job: hash job:<queue>:<id> {payload, attempts, m, token?}; m = 16-digit seq | id orders ties FIFO.
local function enqueue_job(queue, id, payload, runAt)
  local jk = P .. 'job:' .. queue .. ':' .. id
  if redis.call('EXISTS', jk) == 1 then return 0 end
  local seq = redis.call('INCR', P .. 'jobseq')
  local m = string.format('%016d', seq) .. '|' .. id
  redis.call('HSET', jk, 'payload', payload, 'attempts', 0, 'm', m)
  redis.call('ZADD', P .. 'q:' .. queue .. ':wait', runAt, m)
  notify(queue)
  return 1
end
local function enqueue_all(jobs)
  for _, j in ipairs(jobs) do enqueue_job(j[1], j[2], j[3], j[4]) end
end
-- Removes a job we hold the lease of; 0 when the token is not ours.
local function ack_job(q, id, token)
  local jk = P .. 'job:' .. q .. ':' .. id
  if redis.call('HGET', jk, 'token') ~= token then return 0 end
  local m = redis.call('HGET', jk, 'm')
  redis.call('ZREM', P .. 'q:' .. q .. ':wait', m)
  redis.call('ZREM', P .. 'q:' .. q .. ':leased', m)
  redis.call('DEL', jk)
  return 1
end
-- Back to waiting at runAt, behind jobs already waiting for that time. An uncounted release
-- (defer) gives the lease's attempt back and may replace the payload ('' keeps it).
local function release_job(q, id, token, runAt, counted, payload)
  local jk = P .. 'job:' .. q .. ':' .. id
  if redis.call('HGET', jk, 'token') ~= token then return 0 end
  local old = redis.call('HGET', jk, 'm')
  redis.call('ZREM', P .. 'q:' .. q .. ':wait', old)
  redis.call('ZREM', P .. 'q:' .. q .. ':leased', old)
  local m = string.format('%016d', redis.call('INCR', P .. 'jobseq')) .. '|' .. id
  redis.call('HSET', jk, 'm', m)
  redis.call('HDEL', jk, 'token')
  if not counted then
    if tonumber(redis.call('HGET', jk, 'attempts') or '0') > 0 then redis.call('HINCRBY', jk, 'attempts', -1) end
    if payload ~= '' then redis.call('HSET', jk, 'payload', payload) end
  end
  redis.call('ZADD', P .. 'q:' .. q .. ':wait', runAt, m)
  notify(q)
  return 1
end
-- The deliveries queue (Store DELIVERY_QUEUE): no job per delivery; the delivery hash keeps
-- _token (while leased), _leases and _job (payload, absent: none); ids wait in dlvq:wait scored
-- by run time and sit in dlvq:leased scored by lease expiry.
local DQ = 'webhooks.deliver'
local function dq_wait(id, runAt)
  redis.call('ZREM', P .. 'dlvq:leased', id)
  redis.call('ZADD', P .. 'dlvq:wait', runAt, id)
  notify(DQ)
end
local function dq_remove(id)
  redis.call('ZREM', P .. 'dlvq:wait', id)
  redis.call('ZREM', P .. 'dlvq:leased', id)
end
`;

function lua(body: string): LuaScript {
  return new LuaScript(PRELUDE + body);
}

/** EVALSHA with a fallback to EVAL when the server lost its script cache (restart, failover). */
export class LuaScript {
  readonly sha: string;

  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  async run(redis: Redis, args: (string | number)[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.sha, 0, ...args);
    } catch (err) {
      if (err instanceof Error && err.message.startsWith('NOSCRIPT')) return redis.eval(this.source, 0, ...args);
      throw err;
    }
  }
}

export const scripts = {
  /** key, setKey ('' for none), setMember, fields → 1, or 0 when the key exists. */
  insert: lua(`
local key = arg(); local setKey = arg(); local setMember = arg(); local fields = argfields()
if redis.call('EXISTS', key) == 1 then return 0 end
hset_fields(key, fields)
if setKey ~= '' then redis.call('SADD', setKey, setMember) end
return 1
`),

  /** key, fields → the record after the patch, or nil when missing. */
  update: lua(`
local key = arg(); local fields = argfields()
if redis.call('EXISTS', key) == 0 then return false end
hset_fields(key, fields)
return redis.call('HGETALL', key)
`),

  /**
   * id, accountId, month, limit ('' = unlimited), maxActive, listMember, fields, jobs
   * → {'ok', position} | {'quota', used, limit} | {'busy', active} | {'conflict'}.
   */
  songCreate: lua(`
local id = arg(); local acct = arg(); local month = arg(); local limit = arg(); local maxActive = argn()
local member = arg(); local fields = argfields(); local jobs = argjobs()
local sk = P .. 'sng:' .. id
local usageKey = P .. 'usage:' .. acct .. ':' .. month
local activeKey = P .. 'sng:active:' .. acct
local used = tonumber(redis.call('GET', usageKey) or '0')
if limit ~= '' and used >= tonumber(limit) then return { 'quota', used, tonumber(limit) } end
local active = redis.call('SCARD', activeKey)
if active >= maxActive then return { 'busy', active } end
if redis.call('EXISTS', sk) == 1 then return { 'conflict' } end
local seq = redis.call('INCR', P .. 'sng:seq')
hset_fields(sk, fields)
redis.call('HSET', sk, '_seq', seq, '_acct', acct, '_m', member)
redis.call('ZADD', P .. 'sng:queued', seq, id)
redis.call('SADD', activeKey, id)
redis.call('INCR', usageKey)
redis.call('ZADD', P .. 'sng:acct:' .. acct, 0, member)
enqueue_all(jobs)
return { 'ok', redis.call('ZRANK', P .. 'sng:queued', id) + 1 }
`),

  /** id, newStatus ('' when unchanged), fields → record or nil. Keeps the queued and active indexes. */
  songUpdate: lua(`
local id = arg(); local status = arg(); local fields = argfields()
local sk = P .. 'sng:' .. id
if redis.call('EXISTS', sk) == 0 then return false end
hset_fields(sk, fields)
if status ~= '' then
  local acct = redis.call('HGET', sk, '_acct')
  if status == 'queued' or status == 'rendering' then
    redis.call('SADD', P .. 'sng:active:' .. acct, id)
  else
    redis.call('SREM', P .. 'sng:active:' .. acct, id)
  end
  if status == 'queued' then
    redis.call('ZADD', P .. 'sng:queued', redis.call('HGET', sk, '_seq'), id)
  else
    redis.call('ZREM', P .. 'sng:queued', id)
  end
end
return redis.call('HGETALL', sk)
`),

  /** id, errorJson, finishedAtJson → record or nil; gives the month's count back once. */
  songFail: lua(`
local id = arg(); local err = arg(); local finishedAt = arg()
local sk = P .. 'sng:' .. id
if redis.call('EXISTS', sk) == 0 then return false end
if redis.call('HGET', sk, 'status') == '"failed"' then return redis.call('HGETALL', sk) end
local acct = redis.call('HGET', sk, '_acct')
redis.call('HSET', sk, 'status', '"failed"', 'error', err, 'finishedAt', finishedAt)
redis.call('SREM', P .. 'sng:active:' .. acct, id)
redis.call('ZREM', P .. 'sng:queued', id)
local month = cjson.decode(redis.call('HGET', sk, 'usageMonth'))
local usageKey = P .. 'usage:' .. acct .. ':' .. month
if tonumber(redis.call('GET', usageKey) or '0') > 0 then redis.call('DECR', usageKey) end
return redis.call('HGETALL', sk)
`),

  /** id, accountId, streamKey, playbackId, listMember, state, deleted ('1'|'0'), fields → 1 | {'conflict'}. */
  streamCreate: lua(`
local id = arg(); local acct = arg(); local skey = arg(); local pb = arg(); local member = arg()
local state = arg(); local deleted = arg(); local fields = argfields()
local rk = P .. 'str:' .. id
if redis.call('EXISTS', rk) == 1 or redis.call('EXISTS', P .. 'str:bykey:' .. skey) == 1
  or redis.call('EXISTS', P .. 'str:bypb:' .. pb) == 1 then
  return { 'conflict' }
end
hset_fields(rk, fields)
redis.call('HSET', rk, '_acct', acct, '_m', member)
redis.call('SET', P .. 'str:bykey:' .. skey, id)
redis.call('SET', P .. 'str:bypb:' .. pb, id)
if deleted == '0' then redis.call('ZADD', P .. 'str:acct:' .. acct, 0, member) end
redis.call('SADD', P .. 'str:state:' .. state, id)
return 1
`),

  /**
   * id, nFrom (-1 = any), fromStates as JSON..., then optional values as '' (unchanged) or
   * '=' .. value: state, deleted ('1'|'0'), streamKey, playbackId; fields, jobs
   * → {'ok', record} | {'conflict'} | nil (missing or in another state).
   */
  streamUpdate: lua(`
local id = arg(); local nfrom = argn(); local froms = {}
for i = 1, math.max(nfrom, 0) do froms[i] = arg() end
local newState = arg(); local newDeleted = arg(); local newKey = arg(); local newPb = arg()
local fields = argfields(); local jobs = argjobs()
local rk = P .. 'str:' .. id
if redis.call('EXISTS', rk) == 0 then return false end
local cur = redis.call('HGET', rk, 'state')
if nfrom >= 0 then
  local ok = false
  for _, s in ipairs(froms) do if s == cur then ok = true end end
  if not ok then return false end
end
local oldKey = cjson.decode(redis.call('HGET', rk, 'streamKey'))
local oldPb = cjson.decode(redis.call('HGET', rk, 'playbackId'))
if newKey ~= '' then newKey = string.sub(newKey, 2) else newKey = oldKey end
if newPb ~= '' then newPb = string.sub(newPb, 2) else newPb = oldPb end
if newKey ~= oldKey and redis.call('EXISTS', P .. 'str:bykey:' .. newKey) == 1 then return { 'conflict' } end
if newPb ~= oldPb and redis.call('EXISTS', P .. 'str:bypb:' .. newPb) == 1 then return { 'conflict' } end
if newKey ~= oldKey then
  redis.call('DEL', P .. 'str:bykey:' .. oldKey)
  redis.call('SET', P .. 'str:bykey:' .. newKey, id)
end
if newPb ~= oldPb then
  redis.call('DEL', P .. 'str:bypb:' .. oldPb)
  redis.call('SET', P .. 'str:bypb:' .. newPb, id)
end
if newState ~= '' then
  redis.call('SREM', P .. 'str:state:' .. cjson.decode(cur), id)
  redis.call('SADD', P .. 'str:state:' .. string.sub(newState, 2), id)
end
if newDeleted ~= '' then
  local listKey = P .. 'str:acct:' .. redis.call('HGET', rk, '_acct')
  local member = redis.call('HGET', rk, '_m')
  if newDeleted == '=1' then redis.call('ZREM', listKey, member) else redis.call('ZADD', listKey, 0, member) end
end
hset_fields(rk, fields)
enqueue_all(jobs)
return { 'ok', redis.call('HGETALL', rk) }
`),

  /** id, accountId, listMember, max, fields → 1 | 0 (cap reached) | -1 (id taken). */
  endpointCreate: lua(`
local id = arg(); local acct = arg(); local member = arg(); local max = argn(); local fields = argfields()
local listKey = P .. 'whk:acct:' .. acct
if redis.call('ZCARD', listKey) >= max then return 0 end
local ek = P .. 'whk:' .. id
if redis.call('EXISTS', ek) == 1 then return -1 end
hset_fields(ek, fields)
redis.call('HSET', ek, '_acct', acct, '_m', member)
redis.call('ZADD', listKey, 0, member)
return 1
`),

  /** id, success ('1'|'0'), disableAt → record or nil. */
  recordOutcome: lua(`
local id = arg(); local success = arg(); local disableAt = argn()
local ek = P .. 'whk:' .. id
if redis.call('EXISTS', ek) == 0 then return false end
if success == '1' then
  redis.call('HSET', ek, 'consecutiveFailures', '0')
else
  local failures = tonumber(redis.call('HGET', ek, 'consecutiveFailures') or '0') + 1
  redis.call('HSET', ek, 'consecutiveFailures', string.format('%d', failures))
  if failures >= disableAt then redis.call('HSET', ek, 'isActive', 'false') end
end
return redis.call('HGETALL', ek)
`),

  /** id → 1 | 0; removes the endpoint and its delivery log. */
  endpointDelete: lua(`
local id = arg()
local ek = P .. 'whk:' .. id
if redis.call('EXISTS', ek) == 0 then return 0 end
local logKey = P .. 'dlv:ep:' .. id
for _, m in ipairs(redis.call('ZRANGE', logKey, 0, -1)) do
  local did = string.sub(m, 17)
  local dk = P .. 'dlv:' .. did
  local pair = redis.call('HGET', dk, '_pair')
  if pair then redis.call('DEL', pair) end
  redis.call('DEL', dk)
  redis.call('DEL', P .. 'dlvatt:' .. did)
  redis.call('ZREM', P .. 'dlv:all', did)
  dq_remove(did)
end
redis.call('DEL', logKey)
redis.call('ZREM', P .. 'whk:acct:' .. redis.call('HGET', ek, '_acct'), redis.call('HGET', ek, '_m'))
redis.call('DEL', ek)
return 1
`),

  /**
   * n, then per delivery: id, endpointId, pairKey, createdMs, listMember, fields, dueMs ('' for a
   * delivery that is not queued); then the jobs to ack: count, then queue, id, token each → the
   * 1-based indexes of the deliveries inserted.
   */
  deliveriesCreate: lua(`
local n = argn()
local inserted = {}
for i = 1, n do
  local id = arg(); local ep = arg(); local pair = arg(); local ms = arg(); local member = arg()
  local fields = argfields(); local due = arg()
  if redis.call('SET', P .. pair, id, 'NX') then
    local dk = P .. 'dlv:' .. id
    hset_fields(dk, fields)
    redis.call('HSET', dk, '_pair', P .. pair, '_ep', ep, '_m', member, '_leases', 0)
    redis.call('ZADD', P .. 'dlv:ep:' .. ep, 0, member)
    redis.call('ZADD', P .. 'dlv:all', ms, id)
    if due ~= '' then dq_wait(id, tonumber(due)) end
    inserted[#inserted + 1] = i
  end
end
for i = 1, argn() do
  local ackq = arg(); local ackid = arg(); local acktoken = arg()
  ack_job(ackq, ackid, acktoken)
end
return inserted
`),

  /**
   * One lease-and-settle cycle. n, then per item: deliveryId, fields, token, mode
   * ('finish'|'retry'|'defer'), runAtMs, payload ('' keeps it), attempt JSON ('' for none), keep;
   * then max, leaseMs, tokenBase → {{HGETALL of the delivery, leases, leasedUntilMs, token}…}.
   * Patches each delivery that exists (appending its attempt to its attempts log, kept to the
   * newest keep), then moves its queue state when the lease is still ours; then leases up to max
   * due deliveries. Expired leases go back to waiting first, scored by their expiry.
   */
  deliveriesCycle: lua(`
local n = argn()
for i = 1, n do
  local did = arg(); local fields = argfields()
  local token = arg(); local mode = arg(); local runAt = argn(); local payload = arg()
  local doc = arg(); local keep = argn()
  local dk = P .. 'dlv:' .. did
  if redis.call('EXISTS', dk) == 1 then
    hset_fields(dk, fields)
    if doc ~= '' then
      local key = P .. 'dlvatt:' .. did
      redis.call('RPUSH', key, doc)
      redis.call('LTRIM', key, -keep, -1)
    end
    if redis.call('HGET', dk, '_token') == token then
      redis.call('HDEL', dk, '_token')
      if mode == 'finish' then
        dq_remove(did)
      else
        if mode == 'defer' then
          if tonumber(redis.call('HGET', dk, '_leases') or '0') > 0 then redis.call('HINCRBY', dk, '_leases', -1) end
          if payload ~= '' then redis.call('HSET', dk, '_job', payload) end
        end
        dq_wait(did, runAt)
      end
    end
  end
end
local max = argn(); local leaseMs = argn(); local tokenBase = arg()
if max <= 0 then return {} end
local wait = P .. 'dlvq:wait'
local leased = P .. 'dlvq:leased'
local expired = redis.call('ZRANGEBYSCORE', leased, '-inf', NOW, 'WITHSCORES', 'LIMIT', 0, 100)
for i = 1, #expired, 2 do
  redis.call('ZADD', wait, expired[i + 1], expired[i])
  redis.call('ZREM', leased, expired[i])
end
local top = redis.call('ZRANGEBYSCORE', wait, '-inf', NOW, 'LIMIT', 0, max)
local untilMs = NOW + leaseMs
local out = {}
for i, id in ipairs(top) do
  local dk = P .. 'dlv:' .. id
  redis.call('ZREM', wait, id)
  if redis.call('EXISTS', dk) == 1 then
    local token = tokenBase .. ':' .. i
    redis.call('ZADD', leased, untilMs, id)
    local leases = redis.call('HINCRBY', dk, '_leases', 1)
    redis.call('HSET', dk, '_token', token)
    out[#out + 1] = { redis.call('HGETALL', dk), leases, untilMs, token }
  end
end
return out
`),

  /**
   * → jobs moved. Upgrade step, idempotent: jobs of the old job queue `webhooks.deliver` (one per
   * delivery, before the deliveries were their own queue) move into their deliveries: run time
   * (a leased job's expiry), lease count, payload. A job whose delivery is gone is dropped.
   */
  deliveriesAdoptJobs: lua(`
local moved = 0
for _, part in ipairs({ 'wait', 'leased' }) do
  local zk = P .. 'q:' .. DQ .. ':' .. part
  local all = redis.call('ZRANGE', zk, 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    local m = all[i]; local at = all[i + 1]
    local id = string.sub(m, 18)
    local jk = P .. 'job:' .. DQ .. ':' .. id
    local dk = P .. 'dlv:' .. id
    if redis.call('EXISTS', dk) == 1 then
      redis.call('HSET', dk, '_leases', redis.call('HGET', jk, 'attempts') or '0', '_job', redis.call('HGET', jk, 'payload') or 'null')
      redis.call('HDEL', dk, '_token')
      redis.call('ZADD', P .. 'dlvq:wait', at, id)
      moved = moved + 1
    end
    redis.call('DEL', jk)
    redis.call('ZREM', zk, m)
  end
end
return moved
`),

  /** → {ready, delayed, leased} of the deliveries queue. */
  deliveriesStats: lua(`
local wait = P .. 'dlvq:wait'
local leased = P .. 'dlvq:leased'
local ready = redis.call('ZCOUNT', wait, '-inf', NOW) + redis.call('ZCOUNT', leased, '-inf', NOW)
return { ready, redis.call('ZCOUNT', wait, '(' .. NOW, '+inf'), redis.call('ZCOUNT', leased, '(' .. NOW, '+inf') }
`),

  /** beforeMs, batch → deliveries removed (at most batch; call again while it returns batch). */
  deliveriesPurge: lua(`
local before = arg(); local batch = argn()
local ids = redis.call('ZRANGEBYSCORE', P .. 'dlv:all', '-inf', '(' .. before, 'LIMIT', 0, batch)
for _, id in ipairs(ids) do
  local dk = P .. 'dlv:' .. id
  local pair = redis.call('HGET', dk, '_pair')
  if pair then redis.call('DEL', pair) end
  local ep = redis.call('HGET', dk, '_ep')
  if ep then redis.call('ZREM', P .. 'dlv:ep:' .. ep, redis.call('HGET', dk, '_m')) end
  redis.call('DEL', dk)
  redis.call('DEL', P .. 'dlvatt:' .. id)
  redis.call('ZREM', P .. 'dlv:all', id)
  dq_remove(id)
end
return #ids
`),

  /**
   * deliveryId, fields, runAtMs, payload → the record after the patch, or false when missing or
   * pending. A resend's compare-and-set: the patch and its place in the queue land together.
   */
  deliveryRequeue: lua(`
local id = arg(); local dk = P .. 'dlv:' .. id; local fields = argfields(); local runAt = argn(); local payload = arg()
if redis.call('EXISTS', dk) == 0 then return false end
if redis.call('HGET', dk, 'status') == '"pending"' then return false end
hset_fields(dk, fields)
redis.call('HSET', dk, '_leases', 0, '_job', payload)
redis.call('HDEL', dk, '_token')
dq_wait(id, runAt)
return redis.call('HGETALL', dk)
`),

  /**
   * deliveryId, fields, attempt JSON, keep → the record after the patch (and the send appended to
   * its attempts log, kept to the newest `keep`), or false when missing (nothing written).
   */
  deliveryUpdateLogged: lua(`
local id = arg(); local fields = argfields(); local doc = arg(); local keep = argn()
local dk = P .. 'dlv:' .. id
if redis.call('EXISTS', dk) == 0 then return false end
hset_fields(dk, fields)
local key = P .. 'dlvatt:' .. id
redis.call('RPUSH', key, doc)
redis.call('LTRIM', key, -keep, -1)
return redis.call('HGETALL', dk)
`),

  /** deliveryId, attempt JSON, keep → 1, or 0 when the delivery is gone (nothing written). */
  attemptAdd: lua(`
local id = arg(); local doc = arg(); local keep = argn()
if redis.call('EXISTS', P .. 'dlv:' .. id) == 0 then return 0 end
local key = P .. 'dlvatt:' .. id
redis.call('RPUSH', key, doc)
redis.call('LTRIM', key, -keep, -1)
return 1
`),

  /** queue, id, payload, runAtMs → 1 | 0 (id already queued or leased). */
  enqueue: lua(`
local q = arg(); local id = arg(); local payload = arg(); local runAt = argn()
return enqueue_job(q, id, payload, runAt)
`),

  /**
   * queue, leaseMs, max, tokenBase → {{id, payload, attempts, leasedUntilMs, token}…}, at most
   * max, in run-time order. Expired leases go back to the wait set first, scored by their
   * expiry, so they compete by time like any due job.
   */
  lease: lua(`
local q = arg(); local leaseMs = argn(); local max = argn(); local tokenBase = arg()
local wait = P .. 'q:' .. q .. ':wait'
local leased = P .. 'q:' .. q .. ':leased'
local expired = redis.call('ZRANGEBYSCORE', leased, '-inf', NOW, 'WITHSCORES', 'LIMIT', 0, 100)
for i = 1, #expired, 2 do
  redis.call('ZADD', wait, expired[i + 1], expired[i])
  redis.call('ZREM', leased, expired[i])
end
local top = redis.call('ZRANGEBYSCORE', wait, '-inf', NOW, 'LIMIT', 0, max)
local untilMs = NOW + leaseMs
local out = {}
for i, m in ipairs(top) do
  local id = string.sub(m, 18)
  local jk = P .. 'job:' .. q .. ':' .. id
  local token = tokenBase .. ':' .. i
  redis.call('ZREM', wait, m)
  redis.call('ZADD', leased, untilMs, m)
  local attempts = redis.call('HINCRBY', jk, 'attempts', 1)
  redis.call('HSET', jk, 'token', token)
  out[i] = { id, redis.call('HGET', jk, 'payload'), attempts, untilMs, token }
end
return out
`),

  /** queue, id, token → 1 | 0 (not our lease). */
  ack: lua(`
local q = arg(); local id = arg(); local token = arg()
return ack_job(q, id, token)
`),

  /** queue, id, token, runAtMs → 1 | 0. Requeues behind jobs already waiting for the same time. */
  retry: lua(`
local q = arg(); local id = arg(); local token = arg(); local runAt = argn()
return release_job(q, id, token, runAt, true, '')
`),

  /** queue, id, token, runAtMs, payload ('' keeps it) → 1 | 0. Like retry, but the lease is not counted. */
  defer: lua(`
local q = arg(); local id = arg(); local token = arg(); local runAt = argn(); local payload = arg()
return release_job(q, id, token, runAt, false, payload)
`),

  /** queue, id, token, leaseMs → 1 | 0. */
  extend: lua(`
local q = arg(); local id = arg(); local token = arg(); local leaseMs = argn()
local jk = P .. 'job:' .. q .. ':' .. id
if redis.call('HGET', jk, 'token') ~= token then return 0 end
local m = redis.call('HGET', jk, 'm')
redis.call('ZREM', P .. 'q:' .. q .. ':wait', m)
redis.call('ZADD', P .. 'q:' .. q .. ':leased', NOW + leaseMs, m)
return 1
`),

  /** queue → {ready, delayed, leased}. */
  stats: lua(`
local q = arg()
local wait = P .. 'q:' .. q .. ':wait'
local leased = P .. 'q:' .. q .. ':leased'
local ready = redis.call('ZCOUNT', wait, '-inf', NOW) + redis.call('ZCOUNT', leased, '-inf', NOW)
return { ready, redis.call('ZCOUNT', wait, '(' .. NOW, '+inf'), redis.call('ZCOUNT', leased, '(' .. NOW, '+inf') }
`),

  /**
   * key, intervalMs → the start of the slot reserved (ms). GCRA without burst: the key holds the
   * end of the last slot; it expires a minute after that end (then the key is idle anyway).
   */
  rateReserve: lua(`
local key = P .. 'rls:' .. arg(); local interval = argn()
local tat = tonumber(redis.call('GET', key) or '0')
local start = math.max(NOW, tat)
redis.call('SET', key, string.format('%d', start + interval), 'PX', math.floor(start + interval - NOW + 60000))
return start
`),

  /**
   * key, max, windowMs, member → {allowed (1|0), remaining, retryAfterMs}. Sliding log: a hit
   * counts while now - t < windowMs. The key's TTL is only cleanup, so it is generous.
   */
  rateHit: lua(`
local key = P .. 'rl:' .. arg(); local max = argn(); local windowMs = argn(); local member = arg()
redis.call('ZREMRANGEBYSCORE', key, '-inf', NOW - windowMs)
local count = redis.call('ZCARD', key)
if count < max then
  redis.call('ZADD', key, NOW, member)
  redis.call('PEXPIRE', key, windowMs + 60000)
  return { 1, max - count - 1, 0 }
end
local blocker = redis.call('ZRANGE', key, count - max, count - max, 'WITHSCORES')
local retry = windowMs
if blocker[2] then retry = tonumber(blocker[2]) + windowMs - NOW end
if retry < 1 then retry = 1 end
return { 0, 0, retry }
`),
} as const;

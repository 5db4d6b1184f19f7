import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { StoreError } from './errors.ts';
import { checkQueueName, cleanPatch, createdMs, decodeCursor, encodeCursor, pageLimit, sortMember } from './paging.ts';
import { RedisNodeRegistry } from './RedisNodeRegistry.ts';
import { scripts } from './RedisScripts.ts';
import type { LuaScript } from './RedisScripts.ts';
import { WorkSignal } from './WorkSignal.ts';
import type {
  Account,
  ApiKeyRecord,
  Page,
  PageRequest,
  SongRecord,
  StreamRecord,
  WebhookAttemptRecord,
  WebhookDeliveryRecord,
  WebhookEndpointRecord,
} from './records.ts';
import { isRecordId } from './records.ts';
import { DELIVERY_QUEUE } from './Store.ts';
import type {
  AccountRepo,
  CounterRepo,
  Bus,
  DeliveryFilter,
  DeliverySettlement,
  Effects,
  JobQueue,
  LeasedDelivery,
  LeasedJob,
  NewJob,
  RateLimiter,
  RateLimitResult,
  SongCreateResult,
  SongCreateRules,
  SongRepo,
  Store,
  StoreOptions,
  StreamRepo,
  Unsubscribe,
  WebhookRepo,
} from './Store.ts';

export interface RedisStoreOptions extends StoreOptions {
  /** `redis://[:password@]host:port[/db]`. */
  url: string;
  /** Prefix of every key and channel; default `rv:`. Lets tests and deployments share a server. */
  prefix?: string;
  /** How long `ping()` waits before calling Redis unreachable; default 2000 ms. */
  pingTimeoutMs?: number;
  /** ms between the bus's self-checks (a probe published to its own channel); default 5000. */
  busSelfCheckMs?: number;
}

/** Flat HGETALL reply (or an ioredis object) → record; `_` fields are index bookkeeping. */
function decodeRecord<T>(reply: unknown): T | null {
  const out: Record<string, unknown> = {};
  let any = false;
  const put = (field: string, value: string): void => {
    any = true;
    if (!field.startsWith('_')) out[field] = JSON.parse(value);
  };
  if (Array.isArray(reply)) {
    for (let i = 0; i + 1 < reply.length; i += 2) put(String(reply[i]), String(reply[i + 1]));
  } else if (reply && typeof reply === 'object') {
    for (const [field, value] of Object.entries(reply as Record<string, string>)) put(field, value);
  } else {
    return null;
  }
  return any ? (out as T) : null;
}

/** Record → `[n, field, json, field, json…]` for the scripts' `argfields()`. */
function fieldArgs(record: object): (string | number)[] {
  const flat: string[] = [];
  for (const [field, value] of Object.entries(record)) {
    if (value === undefined) continue;
    flat.push(field, JSON.stringify(value));
  }
  return [flat.length / 2, ...flat];
}

function jobArgs(jobs: readonly NewJob[], now: number): (string | number)[] {
  const out: (string | number)[] = [jobs.length];
  for (const job of jobs) {
    checkQueueName(job.queue);
    out.push(job.queue, job.id, JSON.stringify(job.payload) ?? 'null', Math.round(job.runAtMs ?? now));
  }
  return out;
}

/** `'='+value` when the patch sets the property, else `''` (see `streamUpdate`). */
/** Jobs to ack inside a script: count, then queue, id, token each. */
function ackArgs(jobs: readonly LeasedJob[]): (string | number)[] {
  return [jobs.length, ...jobs.flatMap((j) => [j.queue, j.id, j.token])];
}

function optional(value: string | undefined): string {
  return value === undefined ? '' : `=${value}`;
}

/**
 * The scale-out store: Redis through ioredis, every multi-key change one Lua script (see
 * RedisScripts.ts). One command connection and one subscriber connection (bus messages and
 * per-queue work notifications).
 */
export class RedisStore implements Store {
  readonly kind = 'redis' as const;
  readonly accounts: AccountRepo;
  readonly songs: SongRepo;
  readonly streams: StreamRepo;
  readonly webhooks: WebhookRepo;
  readonly queue: JobQueue;
  readonly bus: Bus;
  readonly rateLimits: RateLimiter;
  readonly counters: CounterRepo;
  readonly nodes: RedisNodeRegistry;

  private readonly ctx: Ctx;
  private readonly subscriber: Subscriber;
  private readonly pingTimeoutMs: number;
  private closing: Promise<void> | null = null;

  static async open(options: RedisStoreOptions): Promise<RedisStore> {
    const connect = async (client: Redis): Promise<void> => {
      client.on('error', (err: unknown) => options.logger?.warn({ err }, 'redis | connection error'));
      try {
        await client.connect();
      } catch (cause) {
        client.disconnect();
        throw new StoreError('closed', `cannot reach Redis [url:${redactUrl(options.url)}]`, { cause });
      }
    };
    const redis = new Redis(options.url, { lazyConnect: true, maxRetriesPerRequest: 20 });
    await connect(redis);
    // The Subscriber subscribes again itself on every reconnect (with its errors handled); ioredis'
    // own autoResubscribe sends a SUBSCRIBE whose promise nobody holds, which rejects unhandled
    // ("Connection is closed") when the store closes right after a reconnect.
    const sub = redis.duplicate({ autoResubscribe: false });
    try {
      await connect(sub);
    } catch (err) {
      redis.disconnect();
      throw err;
    }
    const store = new RedisStore(redis, sub, options);
    try {
      // Upgrade: deliveries queued as jobs by an older version become queued deliveries.
      const moved = (await store.ctx.run(scripts.deliveriesAdoptJobs, [])) as number;
      if (moved > 0) options.logger?.info({ moved }, `open() | moved queued delivery jobs into their deliveries [count:${moved}]`);
    } catch (err) {
      await store.close();
      throw err;
    }
    return store;
  }

  private constructor(redis: Redis, sub: Redis, options: RedisStoreOptions) {
    const ctx: Ctx = {
      redis,
      prefix: options.prefix ?? 'rv:',
      now: options.now ?? Date.now,
      run: async (script, args) => {
        if (this.closing) throw new StoreError('closed', 'store is closed');
        return script.run(redis, [ctx.prefix, ctx.now(), ...args]);
      },
    };
    this.ctx = ctx;
    const subscriber = new Subscriber(sub, redis, ctx.prefix, options.logger, options.busSelfCheckMs ?? 5_000);
    this.subscriber = subscriber;
    this.pingTimeoutMs = options.pingTimeoutMs ?? 2000;
    this.accounts = new Accounts(ctx);
    this.songs = new Songs(ctx);
    this.streams = new Streams(ctx);
    this.webhooks = new Webhooks(ctx);
    this.queue = new Jobs(ctx, subscriber);
    this.bus = subscriber;
    this.rateLimits = new Limiter(ctx);
    this.counters = new Counters(ctx, () => this.closing !== null);
    this.nodes = new RedisNodeRegistry(redis, ctx.prefix, ctx.now, () => this.closing !== null);
  }

  async ping(): Promise<void> {
    if (this.closing) throw new StoreError('closed', 'store is closed');
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new StoreError('closed', `Redis did not answer PING in ${this.pingTimeoutMs} ms`)), this.pingTimeoutMs);
    });
    try {
      await Promise.race([this.ctx.redis.ping(), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.subscriber.close();
      const quit = async (client: Redis): Promise<void> => {
        try {
          await client.quit();
        } catch {
          client.disconnect();
        }
      };
      await Promise.all([quit(this.subscriber.client), quit(this.ctx.redis)]);
    })();
    return this.closing;
  }
}

function redactUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//***@');
}

interface Ctx {
  redis: Redis;
  prefix: string;
  now: () => number;
  run(script: LuaScript, args: (string | number)[]): Promise<unknown>;
}

/**
 * Newest-first page over a lex-sorted index of `sortMember`s, loading each record's hash;
 * `filter` pages over the matching records only (scanning in batches).
 */
async function pageIndex<T>(
  ctx: Ctx,
  indexKey: string,
  recordKey: (id: string) => string,
  page: PageRequest,
  filter?: (record: T) => boolean,
  /** Lex bounds on the index (ZRANGEBYLEX syntax): only members within them are read. */
  bounds: { min?: string; max?: string } = {},
): Promise<Page<T>> {
  const limit = pageLimit(page.limit);
  let max = bounds.max ?? '+';
  const min = bounds.min ?? '-';
  if (page.cursor) {
    const { ms, id } = decodeCursor(page.cursor);
    const after = `(${sortMember(ms, id)}`;
    // Both exclusive bounds of one format: the smaller string is the tighter one.
    if (max === '+' || after.slice(1) < max.slice(1)) max = after;
  }
  const items: { member: string; record: T }[] = [];
  let more = false;
  for (;;) {
    const batch = filter ? 200 : limit + 1 - items.length;
    const members = await ctx.redis.zrevrangebylex(indexKey, max, min, 'LIMIT', 0, batch);
    if (members.length === 0) break;
    const records = await loadAll<T>(ctx, members.map((m) => recordKey(m.slice(16))));
    for (let i = 0; i < members.length; i++) {
      const record = records[i];
      if (!record || (filter && !filter(record))) continue;
      if (items.length === limit) {
        more = true;
        break;
      }
      items.push({ member: members[i] as string, record });
    }
    if (more || members.length < batch) break;
    max = `(${members[members.length - 1] as string}`;
  }
  const last = items[items.length - 1];
  return {
    items: items.map((i) => i.record),
    nextCursor: more && last ? encodeCursor(Number(last.member.slice(0, 15)), last.member.slice(16)) : null,
  };
}

async function loadAll<T>(ctx: Ctx, keys: string[]): Promise<(T | null)[]> {
  if (keys.length === 0) return [];
  const replies = await ctx.redis.pipeline(keys.map((key) => ['hgetall', key])).exec();
  return (replies ?? []).map(([err, reply]) => {
    if (err) throw err;
    return decodeRecord<T>(reply);
  });
}

async function load<T>(ctx: Ctx, key: string): Promise<T | null> {
  return decodeRecord<T>(await ctx.redis.hgetall(key));
}

function conflict(what: string): StoreError {
  return new StoreError('conflict', what);
}

// ───────────────────────────── accounts

class Accounts implements AccountRepo {
  constructor(private readonly ctx: Ctx) {}

  async create(account: Account): Promise<void> {
    const p = this.ctx.prefix;
    const ok = await this.ctx.run(scripts.insert, [`${p}acct:${account.id}`, `${p}accts`, account.id, ...fieldArgs(account)]);
    if (ok !== 1) throw conflict(`account exists [accountId:${account.id}]`);
  }

  async get(id: string): Promise<Account | null> {
    return load<Account>(this.ctx, `${this.ctx.prefix}acct:${id}`);
  }

  async setPlan(id: string, plan: Account['plan']): Promise<void> {
    await this.ctx.run(scripts.update, [`${this.ctx.prefix}acct:${id}`, ...fieldArgs({ plan })]);
  }

  async setAdmission(id: string, admission: Account['admission']): Promise<void> {
    await this.ctx.run(scripts.update, [`${this.ctx.prefix}acct:${id}`, ...fieldArgs({ admission: admission ?? null })]);
  }

  async addKey(key: ApiKeyRecord): Promise<void> {
    const ok = await this.ctx.run(scripts.insert, [`${this.ctx.prefix}apikey:${key.digest}`, '', '', ...fieldArgs(key)]);
    if (ok !== 1) throw conflict(`key digest exists [accountId:${key.accountId}]`);
  }

  async findKey(digest: string): Promise<ApiKeyRecord | null> {
    return load<ApiKeyRecord>(this.ctx, `${this.ctx.prefix}apikey:${digest}`);
  }

  async count(): Promise<number> {
    return this.ctx.redis.scard(`${this.ctx.prefix}accts`);
  }
}

// ───────────────────────────── songs

class Songs implements SongRepo {
  constructor(private readonly ctx: Ctx) {}

  private key(id: string): string {
    return `${this.ctx.prefix}sng:${id}`;
  }

  async create(song: SongRecord, rules: SongCreateRules, effects?: Effects): Promise<SongCreateResult> {
    const record: SongRecord = { ...song, status: 'queued' };
    const member = sortMember(createdMs(record.createdAt), record.id);
    const reply = (await this.ctx.run(scripts.songCreate, [
      record.id,
      record.accountId,
      rules.month,
      rules.monthlyLimit === null ? '' : rules.monthlyLimit,
      rules.maxActive,
      member,
      ...fieldArgs(record),
      ...jobArgs(effects?.jobs ?? [], this.ctx.now()),
    ])) as [string, ...number[]];
    switch (reply[0]) {
      case 'ok':
        return { ok: true, song: record, position: reply[1] as number };
      case 'quota':
        return { ok: false, reason: 'quota', used: reply[1] as number, limit: reply[2] as number };
      case 'busy':
        return { ok: false, reason: 'busy', active: reply[1] as number };
      default:
        throw conflict(`song exists [songId:${record.id}]`);
    }
  }

  async get(id: string): Promise<SongRecord | null> {
    if (!isRecordId('sng', id)) return null;
    return load<SongRecord>(this.ctx, this.key(id));
  }

  async list(accountId: string, page: PageRequest): Promise<Page<SongRecord>> {
    return pageIndex<SongRecord>(this.ctx, `${this.ctx.prefix}sng:acct:${accountId}`, (id) => this.key(id), page);
  }

  async update(id: string, patch: Partial<Omit<SongRecord, 'id' | 'accountId' | 'createdAt'>>): Promise<SongRecord | null> {
    const clean = cleanPatch(patch, ['id', 'accountId', 'createdAt']);
    const reply = await this.ctx.run(scripts.songUpdate, [id, clean.status ?? '', ...fieldArgs(clean)]);
    return decodeRecord<SongRecord>(reply);
  }

  async fail(id: string, error: SongRecord['error'], finishedAt: string): Promise<SongRecord | null> {
    const reply = await this.ctx.run(scripts.songFail, [id, JSON.stringify(error), JSON.stringify(finishedAt)]);
    return decodeRecord<SongRecord>(reply);
  }

  async position(id: string): Promise<number | null> {
    const rank = await this.ctx.redis.zrank(`${this.ctx.prefix}sng:queued`, id);
    return rank === null ? null : rank + 1;
  }

  async used(accountId: string, month: string): Promise<number> {
    return Number((await this.ctx.redis.get(`${this.ctx.prefix}usage:${accountId}:${month}`)) ?? 0);
  }

  async active(accountId: string): Promise<number> {
    return this.ctx.redis.scard(`${this.ctx.prefix}sng:active:${accountId}`);
  }
}

// ───────────────────────────── streams

class Streams implements StreamRepo {
  constructor(private readonly ctx: Ctx) {}

  private key(id: string): string {
    return `${this.ctx.prefix}str:${id}`;
  }

  async create(stream: StreamRecord): Promise<void> {
    const reply = await this.ctx.run(scripts.streamCreate, [
      stream.id,
      stream.accountId,
      stream.streamKey,
      stream.playbackId,
      sortMember(createdMs(stream.createdAt), stream.id),
      stream.state,
      stream.deleted ? '1' : '0',
      ...fieldArgs(stream),
    ]);
    if (reply !== 1) throw conflict(`stream id, key or playback id taken [streamId:${stream.id}]`);
  }

  async get(id: string): Promise<StreamRecord | null> {
    if (!isRecordId('str', id)) return null;
    return load<StreamRecord>(this.ctx, this.key(id));
  }

  async getByKey(streamKey: string): Promise<StreamRecord | null> {
    const id = await this.ctx.redis.get(`${this.ctx.prefix}str:bykey:${streamKey}`);
    return id === null ? null : this.get(id);
  }

  async getByPlaybackId(playbackId: string): Promise<StreamRecord | null> {
    const id = await this.ctx.redis.get(`${this.ctx.prefix}str:bypb:${playbackId}`);
    return id === null ? null : this.get(id);
  }

  async list(accountId: string, page: PageRequest): Promise<Page<StreamRecord>> {
    return pageIndex<StreamRecord>(this.ctx, `${this.ctx.prefix}str:acct:${accountId}`, (id) => this.key(id), page);
  }

  async update(
    id: string,
    patch: Partial<Omit<StreamRecord, 'id' | 'accountId' | 'createdAt'>>,
    opts?: { fromStates?: StreamRecord['state'][]; effects?: Effects },
  ): Promise<StreamRecord | null> {
    const clean = cleanPatch(patch, ['id', 'accountId', 'createdAt']);
    const from = opts?.fromStates;
    const reply = (await this.ctx.run(scripts.streamUpdate, [
      id,
      from ? from.length : -1,
      ...(from ?? []).map((s) => JSON.stringify(s)),
      optional(clean.state),
      optional(clean.deleted === undefined ? undefined : clean.deleted ? '1' : '0'),
      optional(clean.streamKey),
      optional(clean.playbackId),
      ...fieldArgs(clean),
      ...jobArgs(opts?.effects?.jobs ?? [], this.ctx.now()),
    ])) as [string, unknown] | null;
    if (reply === null) return null;
    if (reply[0] === 'conflict') throw conflict(`stream key or playback id taken [streamId:${id}]`);
    return decodeRecord<StreamRecord>(reply[1]);
  }

  async listByState(states: StreamRecord['state'][]): Promise<StreamRecord[]> {
    if (states.length === 0) return [];
    const ids = await this.ctx.redis.sunion(...states.map((s) => `${this.ctx.prefix}str:state:${s}`));
    const keys = ids.map((id) => this.key(id));
    const records = (await loadAll<StreamRecord>(this.ctx, keys)).filter((r): r is StreamRecord => r !== null);
    // Same order as the embedded store: creation order.
    const order = (r: StreamRecord): string => sortMember(createdMs(r.createdAt), r.id);
    return records.sort((a, b) => (order(a) < order(b) ? -1 : order(a) > order(b) ? 1 : 0));
  }
}

// ───────────────────────────── webhooks

class Webhooks implements WebhookRepo {
  constructor(private readonly ctx: Ctx) {}

  private key(id: string): string {
    return `${this.ctx.prefix}whk:${id}`;
  }

  private deliveryKey(id: string): string {
    return `${this.ctx.prefix}dlv:${id}`;
  }

  async createEndpoint(endpoint: WebhookEndpointRecord, maxPerAccount: number): Promise<boolean> {
    const reply = await this.ctx.run(scripts.endpointCreate, [
      endpoint.id,
      endpoint.accountId,
      sortMember(createdMs(endpoint.createdAt), endpoint.id),
      maxPerAccount,
      ...fieldArgs(endpoint),
    ]);
    if (reply === -1) throw conflict(`endpoint exists [endpointId:${endpoint.id}]`);
    return reply === 1;
  }

  async getEndpoint(id: string): Promise<WebhookEndpointRecord | null> {
    if (!isRecordId('whk', id)) return null;
    return load<WebhookEndpointRecord>(this.ctx, this.key(id));
  }

  async listEndpoints(accountId: string): Promise<WebhookEndpointRecord[]> {
    const members = await this.ctx.redis.zrange(`${this.ctx.prefix}whk:acct:${accountId}`, 0, -1);
    const records = await loadAll<WebhookEndpointRecord>(
      this.ctx,
      members.map((m) => this.key(m.slice(16))),
    );
    return records.filter((r): r is WebhookEndpointRecord => r !== null);
  }

  async updateEndpoint(
    id: string,
    patch: Partial<Omit<WebhookEndpointRecord, 'id' | 'accountId' | 'createdAt'>>,
  ): Promise<WebhookEndpointRecord | null> {
    const clean = cleanPatch(patch, ['id', 'accountId', 'createdAt']);
    return decodeRecord<WebhookEndpointRecord>(await this.ctx.run(scripts.update, [this.key(id), ...fieldArgs(clean)]));
  }

  async deleteEndpoint(id: string): Promise<boolean> {
    return (await this.ctx.run(scripts.endpointDelete, [id])) === 1;
  }

  async recordOutcome(id: string, success: boolean, disableAt: number): Promise<WebhookEndpointRecord | null> {
    const reply = await this.ctx.run(scripts.recordOutcome, [id, success ? '1' : '0', disableAt]);
    return decodeRecord<WebhookEndpointRecord>(reply);
  }

  async createDeliveries(
    deliveries: WebhookDeliveryRecord[],
    opts?: { ack?: LeasedJob | readonly LeasedJob[] },
  ): Promise<WebhookDeliveryRecord[]> {
    const acks = opts?.ack === undefined ? [] : 'token' in opts.ack ? [opts.ack] : opts.ack;
    if (deliveries.length === 0) {
      if (acks.length > 0) await this.ctx.run(scripts.deliveriesCreate, [0, ...ackArgs(acks)]);
      return [];
    }
    const now = this.ctx.now();
    const args: (string | number)[] = [deliveries.length];
    for (const d of deliveries) {
      const ms = createdMs(d.createdAt);
      const due = d.status !== 'pending' ? '' : d.nextAttemptAt === null ? now : Date.parse(d.nextAttemptAt);
      args.push(d.id, d.endpointId, this.pairKey(d.eventId, d.endpointId), ms, sortMember(ms, d.id), ...fieldArgs(d), due);
    }
    args.push(...ackArgs(acks));
    const inserted = (await this.ctx.run(scripts.deliveriesCreate, args)) as number[];
    return inserted.map((i) => deliveries[i - 1] as WebhookDeliveryRecord);
  }

  async getDelivery(id: string): Promise<WebhookDeliveryRecord | null> {
    if (!isRecordId('dlv', id)) return null;
    return load<WebhookDeliveryRecord>(this.ctx, this.deliveryKey(id));
  }

  /** Unprefixed (the scripts add the prefix); length-prefixed so no (endpointId, eventId) pair can spell another. */
  private pairKey(eventId: string, endpointId: string): string {
    return `dlv:pair:${endpointId.length}:${endpointId}:${eventId}`;
  }

  async findDelivery(eventId: string, endpointId: string): Promise<WebhookDeliveryRecord | null> {
    const id = await this.ctx.redis.get(this.ctx.prefix + this.pairKey(eventId, endpointId));
    return id === null ? null : load<WebhookDeliveryRecord>(this.ctx, this.deliveryKey(id));
  }

  async settleDeliveries(items: readonly DeliverySettlement[]): Promise<void> {
    if (items.length === 0) return;
    await this.leaseDeliveries(0, 0, items);
  }

  async leaseDeliveries(max: number, leaseMs: number, settle: readonly DeliverySettlement[] = []): Promise<LeasedDelivery[]> {
    const n = Math.max(0, Math.floor(max));
    if (n === 0 && settle.length === 0) return [];
    const args: (string | number)[] = [settle.length];
    for (const item of settle) {
      const clean = cleanPatch(item.patch, ['id', 'endpointId', 'accountId', 'eventId', 'createdAt']);
      const r = item.release;
      const mode = r === undefined ? 'finish' : r.counted ? 'retry' : 'defer';
      const payload = r?.payload === undefined ? '' : (JSON.stringify(r.payload) ?? 'null');
      const log = item.log && item.log.attempt.deliveryId === item.deliveryId ? item.log : undefined;
      args.push(
        item.deliveryId,
        ...fieldArgs(clean),
        item.job.token,
        mode,
        Math.round(r?.atMs ?? 0),
        payload,
        log ? JSON.stringify(log.attempt) : '',
        log ? Math.max(1, Math.floor(log.keep)) : 1,
      );
    }
    args.push(n, Math.round(leaseMs), randomUUID());
    const reply = (await this.ctx.run(scripts.deliveriesCycle, args)) as [string[], number, number, string][] | null;
    return (reply ?? []).map(([flat, leases, leasedUntilMs, token]) => {
      const at = flat.indexOf('_job');
      const job = at >= 0 && at % 2 === 0 ? (JSON.parse(flat[at + 1] as string) as unknown) : null;
      const delivery = decodeRecord<WebhookDeliveryRecord>(flat) as WebhookDeliveryRecord;
      return { delivery, job: { queue: DELIVERY_QUEUE, id: delivery.id, payload: job, attempts: leases, token, leasedUntilMs } };
    });
  }

  async deliveryQueueStats(): Promise<{ ready: number; delayed: number; leased: number }> {
    const [ready, delayed, leased] = (await this.ctx.run(scripts.deliveriesStats, [])) as [number, number, number];
    return { ready, delayed, leased };
  }

  async updateDelivery(
    id: string,
    patch: Partial<Omit<WebhookDeliveryRecord, 'id' | 'endpointId' | 'accountId' | 'eventId' | 'createdAt'>>,
    log?: { attempt: WebhookAttemptRecord; keep: number },
  ): Promise<WebhookDeliveryRecord | null> {
    const clean = cleanPatch(patch, ['id', 'endpointId', 'accountId', 'eventId', 'createdAt']);
    if (log && log.attempt.deliveryId === id) {
      const keep = Math.max(1, Math.floor(log.keep));
      return decodeRecord<WebhookDeliveryRecord>(
        await this.ctx.run(scripts.deliveryUpdateLogged, [id, ...fieldArgs(clean), JSON.stringify(log.attempt), keep]),
      );
    }
    return decodeRecord<WebhookDeliveryRecord>(
      await this.ctx.run(scripts.update, [this.deliveryKey(id), ...fieldArgs(clean)]),
    );
  }

  async listDeliveries(endpointId: string, filter: DeliveryFilter, page: PageRequest): Promise<Page<WebhookDeliveryRecord>> {
    const filtered = filter.status !== undefined || filter.eventType !== undefined || filter.streamId !== undefined;
    return pageIndex<WebhookDeliveryRecord>(
      this.ctx,
      `${this.ctx.prefix}dlv:ep:${endpointId}`,
      (id) => this.deliveryKey(id),
      page,
      filtered
        ? (d) =>
            (filter.status === undefined || d.status === filter.status) &&
            (filter.eventType === undefined || d.eventType === filter.eventType) &&
            (filter.streamId === undefined || d.streamId === filter.streamId)
        : undefined,
      {
        // Members are `sortMember(ms, id)`: `<15-digit ms>|<id>`, so `<ms>|` sorts before every id of that ms.
        ...(filter.createdFrom !== undefined ? { min: `[${sortMember(createdMs(filter.createdFrom), '')}` } : {}),
        ...(filter.createdBefore !== undefined ? { max: `(${sortMember(createdMs(filter.createdBefore), '')}` } : {}),
      },
    );
  }

  async purgeDeliveries(beforeIso: string): Promise<number> {
    const before = createdMs(beforeIso);
    const batch = 500;
    let total = 0;
    for (;;) {
      const removed = (await this.ctx.run(scripts.deliveriesPurge, [before, batch])) as number;
      total += removed;
      if (removed < batch) return total;
    }
  }

  async requeueDelivery(
    id: string,
    patch: Partial<Omit<WebhookDeliveryRecord, 'id' | 'endpointId' | 'accountId' | 'eventId' | 'createdAt'>>,
    queued: { payload: unknown; runAtMs: number },
  ): Promise<WebhookDeliveryRecord | null> {
    const clean = cleanPatch(patch, ['id', 'endpointId', 'accountId', 'eventId', 'createdAt']);
    return decodeRecord<WebhookDeliveryRecord>(
      await this.ctx.run(scripts.deliveryRequeue, [
        id,
        ...fieldArgs(clean),
        Math.round(queued.runAtMs),
        JSON.stringify(queued.payload) ?? 'null',
      ]),
    );
  }

  async addAttempt(attempt: WebhookAttemptRecord, keep: number): Promise<void> {
    await this.ctx.run(scripts.attemptAdd, [attempt.deliveryId, JSON.stringify(attempt), Math.max(1, Math.floor(keep))]);
  }

  async listAttempts(deliveryId: string): Promise<WebhookAttemptRecord[]> {
    const docs = await this.ctx.redis.lrange(`${this.ctx.prefix}dlvatt:${deliveryId}`, 0, -1);
    return docs.map((d) => JSON.parse(d) as WebhookAttemptRecord);
  }
}

// ───────────────────────────── jobs

class Jobs implements JobQueue {
  constructor(
    private readonly ctx: Ctx,
    private readonly subscriber: Subscriber,
  ) {}

  async enqueue(job: NewJob): Promise<boolean> {
    const [, queue, id, payload, runAt] = jobArgs([job], this.ctx.now());
    return (await this.ctx.run(scripts.enqueue, [queue as string, id as string, payload as string, runAt as number])) === 1;
  }

  async lease(queue: string, leaseMs: number): Promise<LeasedJob | null> {
    return (await this.leaseMany(queue, 1, leaseMs))[0] ?? null;
  }

  async leaseMany(queue: string, max: number, leaseMs: number): Promise<LeasedJob[]> {
    checkQueueName(queue);
    const reply = (await this.ctx.run(scripts.lease, [queue, Math.round(leaseMs), Math.max(1, Math.floor(max)), randomUUID()])) as
      | [string, string, number, number, string][]
      | null;
    return (reply ?? []).map(([id, payload, attempts, leasedUntilMs, token]) => ({
      queue,
      id,
      payload: JSON.parse(payload),
      attempts,
      token,
      leasedUntilMs,
    }));
  }

  async has(queue: string, id: string): Promise<boolean> {
    checkQueueName(queue);
    return (await this.ctx.redis.exists(`${this.ctx.prefix}job:${queue}:${id}`)) === 1;
  }

  async ack(job: LeasedJob): Promise<boolean> {
    return (await this.ctx.run(scripts.ack, [job.queue, job.id, job.token])) === 1;
  }

  async retry(job: LeasedJob, runAtMs: number): Promise<boolean> {
    return (await this.ctx.run(scripts.retry, [job.queue, job.id, job.token, Math.round(runAtMs)])) === 1;
  }

  async defer(job: LeasedJob, runAtMs: number, payload?: unknown): Promise<boolean> {
    const json = payload === undefined ? '' : (JSON.stringify(payload) ?? 'null');
    return (await this.ctx.run(scripts.defer, [job.queue, job.id, job.token, Math.round(runAtMs), json])) === 1;
  }

  async extend(job: LeasedJob, leaseMs: number): Promise<boolean> {
    return (await this.ctx.run(scripts.extend, [job.queue, job.id, job.token, Math.round(leaseMs)])) === 1;
  }

  async stats(queue: string): Promise<{ ready: number; delayed: number; leased: number }> {
    checkQueueName(queue);
    const [ready, delayed, leased] = (await this.ctx.run(scripts.stats, [queue])) as [number, number, number];
    return { ready, delayed, leased };
  }

  async waitForWork(queue: string, maxWaitMs: number, signal?: AbortSignal): Promise<void> {
    checkQueueName(queue);
    // The first wait on a queue returns once subscribed: a job enqueued before the subscription
    // took effect would otherwise be missed until maxWaitMs. The caller leases again.
    if (await this.subscriber.watchQueue(queue)) return;
    await this.subscriber.work.wait(queue, maxWaitMs, signal);
  }
}

// ───────────────────────────── pub/sub

/**
 * Owns the subscriber connection: bus channels (`<prefix>bus:<channel>`, JSON messages) and
 * work notifications (`<prefix>notify:<queue>`, published by the scripts on enqueue/retry).
 * A queue once watched stays subscribed, so a worker loop never misses a notification between
 * two waits. SUBSCRIBE/UNSUBSCRIBE run one at a time so counts and server state agree.
 */
class Subscriber implements Bus {
  readonly work = new WorkSignal();
  private readonly handlers = new Map<string, Set<(message: unknown) => void>>();
  private readonly watched = new Map<string, Promise<void>>();
  /** Our own channel: the self-check publishes here and counts who received it. */
  private readonly probe: string;
  private readonly selfCheck: NodeJS.Timeout;
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;

  /** `client` is connected already: every `ready` it emits from now on is a reconnect. */
  constructor(
    readonly client: Redis,
    private readonly commands: Redis,
    private readonly prefix: string,
    private readonly logger: Logger | undefined,
    selfCheckMs: number,
  ) {
    client.on('message', (channel: string, message: string) => this.onMessage(channel, message));
    this.probe = `${prefix}bus:self:${randomUUID()}`;
    this.serial(() => client.subscribe(this.probe)).catch((err: unknown) => this.logger?.warn({ err }, 'subscriber | probe subscribe failed; the self-check will retry'));
    // ioredis resubscribes what it remembers after a reconnect, but a subscriber connection that
    // comes back deaf says nothing: our own list is the truth, and SUBSCRIBE is idempotent.
    client.on('ready', () => this.resubscribe('reconnected'));
    // Pub/sub has no acknowledgement. PUBLISH answers how many subscribers received a message,
    // so a probe to our own channel that reaches nobody proves this connection went deaf
    // (seen after a 15 s Redis outage under load): subscribe again to everything we hold.
    this.selfCheck = setInterval(() => void this.check(), selfCheckMs);
    this.selfCheck.unref();
  }

  /** Every channel this process listens on: the probe, the handlers' and the watched queues'. */
  private channels(): string[] {
    return [this.probe, ...this.handlers.keys(), ...[...this.watched.keys()].map((q) => `${this.prefix}notify:${q}`)];
  }

  private resubscribe(why: string): void {
    if (this.closed) return;
    const channels = this.channels();
    this.serial(() => this.client.subscribe(...channels)).catch((err: unknown) =>
      this.logger?.warn({ err }, `subscriber | subscribe again failed [why:${why}] [channels:${channels.length}]`),
    );
  }

  /** One self-check: resolves true when the probe reached us (or could not be sent: nothing to judge). */
  async check(): Promise<boolean> {
    if (this.closed || this.client.status !== 'ready' || this.commands.status !== 'ready') return true;
    const received = await this.commands.publish(this.probe, '1').catch(() => null);
    if (received !== 0) return true;
    this.logger?.warn(`subscriber | deaf (a probe to our own channel reached nobody): subscribing again [channels:${this.channels().length}]`);
    this.resubscribe('deaf');
    return false;
  }

  private onMessage(channel: string, message: string): void {
    const notifyPrefix = `${this.prefix}notify:`;
    if (channel.startsWith(notifyPrefix)) {
      this.work.notify(channel.slice(notifyPrefix.length));
      return;
    }
    const set = this.handlers.get(channel);
    if (!set) return;
    for (const handler of [...set]) {
      try {
        handler(JSON.parse(message));
      } catch (err) {
        this.logger?.error({ err, channel }, `subscribe() | handler threw [channel:${channel}]`);
      }
    }
  }

  private serial<T>(task: () => Promise<T>): Promise<T> {
    const next = this.chain.then(task, task);
    this.chain = next.catch(() => undefined);
    return next;
  }

  /** Subscribes to the queue's notify channel once; true for the call that subscribed. */
  async watchQueue(queue: string): Promise<boolean> {
    const existing = this.watched.get(queue);
    if (existing) {
      await existing;
      return false;
    }
    const done = this.serial(async () => {
      await this.client.subscribe(`${this.prefix}notify:${queue}`);
    });
    this.watched.set(queue, done);
    try {
      await done;
    } catch (err) {
      this.watched.delete(queue);
      throw err;
    }
    return true;
  }

  async publish(channel: string, message: unknown): Promise<void> {
    if (this.closed) throw new StoreError('closed', 'store is closed');
    // Publishing goes over the command connection; the subscriber one cannot send PUBLISH.
    await this.commands.publish(`${this.prefix}bus:${channel}`, JSON.stringify(message) ?? 'null');
  }

  async subscribe(channel: string, handler: (message: unknown) => void): Promise<Unsubscribe> {
    if (this.closed) throw new StoreError('closed', 'store is closed');
    const full = `${this.prefix}bus:${channel}`;
    // Own wrapper per subscription, so subscribing one function twice gives two subscriptions.
    const own = (message: unknown): void => handler(message);
    await this.serial(async () => {
      let set = this.handlers.get(full);
      if (!set) {
        // Listed only once Redis confirmed it: a failed SUBSCRIBE must not leave an empty set
        // that makes the next subscribe() skip its own SUBSCRIBE.
        await this.client.subscribe(full);
        set = new Set();
        this.handlers.set(full, set);
      }
      set.add(own);
    });
    let done = false;
    return async () => {
      if (done) return;
      done = true;
      await this.serial(async () => {
        const set = this.handlers.get(full);
        if (!set) return;
        set.delete(own);
        if (set.size === 0) {
          this.handlers.delete(full);
          if (!this.closed) await this.client.unsubscribe(full);
        }
      });
    };
  }

  close(): void {
    this.closed = true;
    clearInterval(this.selfCheck);
    this.work.close();
    this.handlers.clear();
  }
}

// ───────────────────────────── rate limits

class Limiter implements RateLimiter {
  private seq = 0;

  constructor(private readonly ctx: Ctx) {}

  async hit(key: string, max: number, windowMs: number): Promise<RateLimitResult> {
    // Unique member per hit: two hits in the same ms must both count.
    const member = `${this.ctx.now()}:${randomUUID()}:${this.seq++}`;
    const [allowed, remaining, retryAfterMs] = (await this.ctx.run(scripts.rateHit, [key, max, windowMs, member])) as [
      number,
      number,
      number,
    ];
    return { allowed: allowed === 1, remaining, retryAfterMs };
  }
  async reserve(key: string, intervalMs: number): Promise<number> {
    return Number(await this.ctx.run(scripts.rateReserve, [key, Math.max(1, Math.round(intervalMs))]));
  }
}

// ───────────────────────────── counters

class Counters implements CounterRepo {
  constructor(
    private readonly ctx: Ctx,
    private readonly isClosing: () => boolean,
  ) {}

  async add(name: string, delta: number): Promise<number> {
    if (this.isClosing()) throw new StoreError('closed', 'store is closed');
    if (!Number.isSafeInteger(delta)) throw new StoreError('invalid_argument', `counter delta must be an integer [name:${name}]`);
    // INCRBY is atomic on its own; no script needed.
    return this.ctx.redis.incrby(`${this.ctx.prefix}counter:${name}`, delta);
  }

  async get(name: string): Promise<number> {
    if (this.isClosing()) throw new StoreError('closed', 'store is closed');
    const v = await this.ctx.redis.get(`${this.ctx.prefix}counter:${name}`);
    return v === null ? 0 : Number(v);
  }
}

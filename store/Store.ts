import type { Logger } from 'pino';
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
  DeliveryStatus,
} from './records.ts';

/**
 * The storage contract every part talks to. Two implementations pass one contract suite
 * (test/store/contract.ts): `EmbeddedStore` (SQLite in WAL mode under DATA_DIR, the default)
 * and `RedisStore` (REDIS_URL, for scale-out). Code above the store never knows which it has.
 *
 * Atomicity: a method that takes `effects` writes them in the same transaction as its own change.
 * That is our outbox: an event that must follow a state change is a job written with it
 * (queue `events`), so a crash can never keep one without the other.
 *
 * Errors: a taken unique value (id, stream key, playback id, key digest) throws `StoreError`
 * `conflict`; a cursor not handed out by this store throws `invalid_cursor`; a patch that
 * touches an immutable sort key (`createdAt`, a delivery's `eventId`) throws `invalid_argument`.
 * Pages are newest first by (createdAt, id); `limit` is clamped to 1–100.
 */
export interface Store {
  readonly kind: 'embedded' | 'redis';
  readonly accounts: AccountRepo;
  readonly songs: SongRepo;
  readonly streams: StreamRepo;
  readonly webhooks: WebhookRepo;
  readonly queue: JobQueue;
  readonly bus: Bus;
  readonly rateLimits: RateLimiter;
  readonly counters: CounterRepo;
  readonly nodes: NodeRegistry;
  /** Round-trips to the backing store; throws when it is unreachable (for /healthz). */
  ping(): Promise<void>;
  /** Idempotent. Stops waiters, closes connections. */
  close(): Promise<void>;
}

export interface StoreOptions {
  /** Clock in ms since the epoch; injectable so retries and leases are tested without waiting. */
  now?: () => number;
  /** Where a bus subscriber's exception is reported (it never reaches the publisher). */
  logger?: Logger;
}

/** Writes that ride along with a state change (the outbox). */
export interface Effects {
  jobs?: NewJob[];
}

// ───────────────────────────── accounts and keys

export interface AccountRepo {
  create(account: Account): Promise<void>;
  get(id: string): Promise<Account | null>;
  setPlan(id: string, plan: Account['plan']): Promise<void>;
  /** Sets (null: removes) the account's default admission rule. */
  setAdmission(id: string, rule: Account['admission']): Promise<void>;
  addKey(key: ApiKeyRecord): Promise<void>;
  /** Looks a key up by its SHA-256 digest (hex). */
  findKey(digest: string): Promise<ApiKeyRecord | null>;
  /** How many accounts exist (the embedded default creates one on first start). */
  count(): Promise<number>;
}

// ───────────────────────────── songs and monthly usage

export interface SongCreateRules {
  /** `YYYY-MM` (UTC) to count against. */
  month: string;
  /** Songs allowed this month; null = unlimited. */
  monthlyLimit: number | null;
  /** Songs of the account allowed in `queued` or `rendering` at once. */
  maxActive: number;
}

export type SongCreateResult =
  | { ok: true; song: SongRecord; position: number }
  | { ok: false; reason: 'quota'; used: number; limit: number }
  | { ok: false; reason: 'busy'; active: number };

export interface SongRepo {
  /**
   * Atomically: checks the account's active songs against `maxActive` and the month's usage
   * against `monthlyLimit`, then inserts the song (status `queued`), counts one song for the
   * month, and writes `effects` (the render job). Concurrent creates never exceed either limit.
   * The song is stored as `queued` whatever `song.status` says. When both limits are hit the
   * answer is `quota` (the lasting reason; `busy` passes on its own).
   */
  create(song: SongRecord, rules: SongCreateRules, effects?: Effects): Promise<SongCreateResult>;
  get(id: string): Promise<SongRecord | null>;
  /** The account's songs, newest first. */
  list(accountId: string, page: PageRequest): Promise<Page<SongRecord>>;
  /** Merges `patch` into the song; returns the new record, or null if missing. */
  update(id: string, patch: Partial<Omit<SongRecord, 'id' | 'accountId' | 'createdAt'>>): Promise<SongRecord | null>;
  /**
   * Marks the song failed with `error` and gives its count back to `song.usageMonth`, atomically
   * and at most once (a song already `failed` is left as is and nothing is given back twice).
   */
  fail(id: string, error: SongRecord['error'], finishedAt: string): Promise<SongRecord | null>;
  /** 1-based place among all `queued` songs in creation order (1 is next); null if not queued. */
  position(id: string): Promise<number | null>;
  /** Songs counted against `month` for the account. */
  used(accountId: string, month: string): Promise<number>;
  /** Songs of the account in `queued` or `rendering`. */
  active(accountId: string): Promise<number>;
}

// ───────────────────────────── streams

export interface StreamRepo {
  create(stream: StreamRecord): Promise<void>;
  get(id: string): Promise<StreamRecord | null>;
  getByKey(streamKey: string): Promise<StreamRecord | null>;
  getByPlaybackId(playbackId: string): Promise<StreamRecord | null>;
  /** The account's streams that are not deleted, newest first. */
  list(accountId: string, page: PageRequest): Promise<Page<StreamRecord>>;
  /**
   * Compare-and-set: applies `patch` only if the stream's current state is in `fromStates`
   * (any state when omitted), writing `effects` with it. Returns the new record, or null when
   * the stream is missing or in another state (so two detectors cannot both end a session).
   */
  update(
    id: string,
    patch: Partial<Omit<StreamRecord, 'id' | 'accountId' | 'createdAt'>>,
    opts?: { fromStates?: StreamRecord['state'][]; effects?: Effects },
  ): Promise<StreamRecord | null>;
  /** Streams in any of `states` (e.g. `started`, for the lifecycle supervisor), deleted ones included. */
  listByState(states: StreamRecord['state'][]): Promise<StreamRecord[]>;
}

// ───────────────────────────── webhooks

export interface DeliveryFilter {
  status?: DeliveryStatus;
  eventType?: string;
  streamId?: string;
  /** Only deliveries created at or after this ISO time. */
  createdFrom?: string;
  /** Only deliveries created before this ISO time. */
  createdBefore?: string;
}

/**
 * The deliveries table is its own queue (no job row per delivery): a `pending` delivery waits
 * until it is due, is leased (`leaseDeliveries`), and is settled in place (`settleDeliveries`):
 * finished, or released to run again. Leases follow the `JobQueue` rules (a lease stays ours
 * until the delivery is leased again, settled or released; an expired lease makes the delivery
 * due again), and `LeasedJob` is the lease's handle: `queue` is `DELIVERY_QUEUE`, `id` the
 * delivery id, `attempts` the leases since the delivery was queued (this one included; a release
 * with `counted: false` does not count), `payload` what the last release or requeue stored (null
 * for a delivery fresh from `createDeliveries`). `queue.waitForWork(DELIVERY_QUEUE)` wakes when a
 * delivery is created, released or requeued.
 */
export const DELIVERY_QUEUE = 'webhooks.deliver';

/** A due delivery with its lease (`leaseDeliveries`). */
export interface LeasedDelivery {
  delivery: WebhookDeliveryRecord;
  job: LeasedJob;
}

/** One attempt's outcome for `settleDeliveries`. */
export interface DeliverySettlement {
  deliveryId: string;
  patch: Partial<Omit<WebhookDeliveryRecord, 'id' | 'endpointId' | 'accountId' | 'eventId' | 'createdAt'>>;
  /** The delivery's lease (`leaseDeliveries`); a lease that is no longer ours leaves the queue state alone. */
  job: LeasedJob;
  /**
   * Absent: the delivery leaves the queue (it is finished). Present: it is due again at `atMs`;
   * `counted: true` keeps this lease in `attempts` (it was a send), `counted: false` gives it
   * back (held back unsent), with `payload` replacing the stored one when given.
   */
  release?: { atMs: number; counted: boolean; payload?: unknown };
  /**
   * The send's attempts-log entry (a held-back, unsent lease has none): appended to the
   * delivery's log, kept to its newest `keep`, in the same transaction as `patch`.
   */
  log?: { attempt: WebhookAttemptRecord; keep: number };
}

export interface WebhookRepo {
  /** Inserts unless the account already has `maxPerAccount` endpoints (atomic). */
  createEndpoint(endpoint: WebhookEndpointRecord, maxPerAccount: number): Promise<boolean>;
  getEndpoint(id: string): Promise<WebhookEndpointRecord | null>;
  /** Oldest first (creation order). */
  listEndpoints(accountId: string): Promise<WebhookEndpointRecord[]>;
  updateEndpoint(
    id: string,
    patch: Partial<Omit<WebhookEndpointRecord, 'id' | 'accountId' | 'createdAt'>>,
  ): Promise<WebhookEndpointRecord | null>;
  /** Deletes the endpoint and its delivery log. */
  deleteEndpoint(id: string): Promise<boolean>;
  /**
   * Counts one finished delivery: success resets `consecutiveFailures` to 0; failure adds one
   * and sets `isActive` false when it reaches `disableAt`. Atomic; returns the new record
   * (null if missing). `updatedAt` is left to the caller.
   */
  recordOutcome(id: string, success: boolean, disableAt: number): Promise<WebhookEndpointRecord | null>;
  /**
   * Inserts deliveries atomically, each queued (see DELIVERY_QUEUE) to be due at its
   * `nextAttemptAt` (now when null) unless it is not `pending`. Idempotent on
   * (eventId, endpointId): a pair that already has a delivery is skipped. Returns those inserted.
   * `ack`: the event job (or several: a batched fan-out of many events) acked in the same
   * transaction; a job whose lease is no longer ours is left alone, as `queue.ack` does.
   */
  createDeliveries(
    deliveries: WebhookDeliveryRecord[],
    opts?: { ack?: LeasedJob | readonly LeasedJob[] },
  ): Promise<WebhookDeliveryRecord[]>;
  getDelivery(id: string): Promise<WebhookDeliveryRecord | null>;
  /** The delivery of event `eventId` to `endpointId` (the pair is unique), or null. */
  findDelivery(eventId: string, endpointId: string): Promise<WebhookDeliveryRecord | null>;
  /**
   * Records several attempts at once (one transaction, one round trip): each item's `patch` is
   * merged into its delivery (skipped when the delivery is gone), then the delivery leaves the
   * queue, or is released per `release`. A lease that is no longer ours leaves the queue state
   * alone. Items are independent: a missing delivery does not stop the others.
   */
  settleDeliveries(items: readonly DeliverySettlement[]): Promise<void>;
  /**
   * One lease-and-settle cycle in one transaction: settles `settle` (as `settleDeliveries`), then
   * leases up to `max` due deliveries (earliest due first; an expired lease is due at its
   * expiry) for `leaseMs`. `max` 0 only settles.
   */
  leaseDeliveries(max: number, leaseMs: number, settle?: readonly DeliverySettlement[]): Promise<LeasedDelivery[]>;
  /** Counts of the deliveries queue, as `queue.stats` counts a job queue. */
  deliveryQueueStats(): Promise<{ ready: number; delayed: number; leased: number }>;
  /**
   * Merges `patch`; with `log`, also appends `log.attempt` to the delivery's attempts log (kept to
   * its newest `log.keep`) in the same transaction, so a send costs one commit, not two.
   */
  updateDelivery(
    id: string,
    patch: Partial<Omit<WebhookDeliveryRecord, 'id' | 'endpointId' | 'accountId' | 'eventId' | 'createdAt'>>,
    log?: { attempt: WebhookAttemptRecord; keep: number },
  ): Promise<WebhookDeliveryRecord | null>;
  /** Newest first. */
  listDeliveries(endpointId: string, filter: DeliveryFilter, page: PageRequest): Promise<Page<WebhookDeliveryRecord>>;
  /** Deletes deliveries created before `beforeIso` (with their attempts logs); returns how many. */
  purgeDeliveries(beforeIso: string): Promise<number>;
  /**
   * Compare-and-set for a resend: applies `patch` (which sets status `pending`) to a delivery
   * that is not `pending` and queues it, due at `runAtMs` with `payload` and a fresh lease count,
   * atomically. Null when the delivery is missing or already pending (so two resends at once
   * queue one send).
   */
  requeueDelivery(
    id: string,
    patch: Partial<Omit<WebhookDeliveryRecord, 'id' | 'endpointId' | 'accountId' | 'eventId' | 'createdAt'>>,
    queued: { payload: unknown; runAtMs: number },
  ): Promise<WebhookDeliveryRecord | null>;
  /**
   * Appends one send to the delivery's attempts log and keeps only its newest `keep` entries.
   * Nothing is written when the delivery no longer exists (purged, or its endpoint deleted).
   */
  addAttempt(attempt: WebhookAttemptRecord, keep: number): Promise<void>;
  /** The delivery's attempts log, oldest first (at most the `keep` last written). */
  listAttempts(deliveryId: string): Promise<WebhookAttemptRecord[]>;
}

// ───────────────────────────── jobs

export interface NewJob {
  /** `[A-Za-z0-9_.-]{1,64}` (it is part of Redis keys). */
  queue: string;
  /** Idempotency key within the queue: enqueueing an id that is still queued or leased is a no-op. */
  id: string;
  payload: unknown;
  /** Earliest run time, ms since the epoch; default now. */
  runAtMs?: number;
}

export interface LeasedJob {
  queue: string;
  id: string;
  payload: unknown;
  /** Times this job has been leased, this lease included (1 on the first). */
  attempts: number;
  /** Proves this lease: ack/retry/extend with a stale token do nothing. */
  token: string;
  leasedUntilMs: number;
}

/**
 * A durable queue with delays and leases (visibility timeouts), at least once:
 * a leased job that is neither acked nor retried before its lease ends is leased again.
 * A lease stays ours until the job is leased again (its token changes), acked or retried: a
 * holder whose lease ran out may still ack if nobody took the job meanwhile. A lease is expired
 * when `leasedUntilMs <= now()`; a job is due when `runAtMs <= now()`.
 */
export interface JobQueue {
  /** Returns true if enqueued, false if a job with that id is already queued or leased. */
  enqueue(job: NewJob): Promise<boolean>;
  /** Leases the due job with the earliest run time (FIFO among equals), or null. */
  lease(queue: string, leaseMs: number): Promise<LeasedJob | null>;
  /** Leases up to `max` due jobs in one store round trip, in `lease` order (empty when none is due). */
  leaseMany(queue: string, max: number, leaseMs: number): Promise<LeasedJob[]>;
  /** Whether a job with this id is queued or leased in `queue`. */
  has(queue: string, id: string): Promise<boolean>;
  /** Removes the job; false when the lease is no longer ours. */
  ack(job: LeasedJob): Promise<boolean>;
  /** Releases the job to run again at `runAtMs`; false when the lease is no longer ours. */
  retry(job: LeasedJob, runAtMs: number): Promise<boolean>;
  /**
   * Releases the job to run at `runAtMs` WITHOUT counting this lease in `attempts` (the handler
   * held it back unsent: a rate limit, an ordering rule). `payload`, when given, replaces the
   * job's. False when the lease is no longer ours.
   */
  defer(job: LeasedJob, runAtMs: number, payload?: unknown): Promise<boolean>;
  /** Extends our lease by `leaseMs` from now; false when the lease is no longer ours. */
  extend(job: LeasedJob, leaseMs: number): Promise<boolean>;
  /** Counts: `ready` (due, expired leases included), `delayed` (not yet due), `leased` (unexpired leases). */
  stats(queue: string): Promise<{ ready: number; delayed: number; leased: number }>;
  /**
   * Resolves when a job may have become available in `queue` (an enqueue or retry was seen),
   * or after `maxWaitMs`, or when `signal` aborts. Workers use it instead of busy polling.
   * It may resolve early (the Redis store's first wait on a queue returns once subscribed), so
   * callers loop: lease, and wait only when there was nothing to lease.
   */
  waitForWork(queue: string, maxWaitMs: number, signal?: AbortSignal): Promise<void>;
}

// ───────────────────────────── pub/sub

export type Unsubscribe = () => Promise<void>;

/** Fire-and-forget messages between processes (parameter channel, live status). Not durable. */
export interface Bus {
  publish(channel: string, message: unknown): Promise<void>;
  subscribe(channel: string, handler: (message: unknown) => void): Promise<Unsubscribe>;
}

// ───────────────────────────── rate limits

export interface RateLimitResult {
  allowed: boolean;
  /** Requests left in the window after this one. */
  remaining: number;
  /** When refused: ms until one more request would be allowed. */
  retryAfterMs: number;
}

/** Sliding-window limiter: at most `max` hits within any `windowMs` span, so no burst at a window edge. */
export interface RateLimiter {
  hit(key: string, max: number, windowMs: number): Promise<RateLimitResult>;
  /**
   * Reserves the next send slot of `key`, slots `intervalMs` apart (GCRA, no burst): returns
   * the slot's start, ms since the epoch: now when the key is idle, else the end of the last
   * slot reserved. Every call reserves one slot, so callers that get a future time hold it and
   * must not reserve again for the same send. Atomic across processes sharing the store.
   */
  reserve(key: string, intervalMs: number): Promise<number>;
}

// ───────────────────────────── counters

/**
 * Named integer counters (e.g. streaming seconds an account used in a month). Adds are atomic:
 * concurrent adds never lose a count. A counter that was never added to reads 0.
 */
export interface CounterRepo {
  /** Adds `delta` (an integer, may be negative) and returns the new value. */
  add(name: string, delta: number): Promise<number>;
  get(name: string): Promise<number>;
}

// ───────────────────────────── node registry (presence)

/** A registered process as the registry holds it. Times are ms since the epoch on the store's clock. */
export interface NodeEntry {
  id: string;
  /** What the node said about itself in its last beat (plain JSON). */
  info: unknown;
  lastBeatMs: number;
  /** `lastBeatMs + ttlMs` of the last beat: the node counts as alive while `now < expiresAtMs`. */
  expiresAtMs: number;
}

/**
 * Presence of processes (media nodes, workers) by kind, kept alive by heartbeats. An entry whose
 * beats stopped is not removed by the registry: it stays, expired, so a sweeper can tell a node
 * that died (and end what it owned) from one that never existed; the sweeper removes it after.
 * Kinds and ids follow the queue-name rule `[A-Za-z0-9_.:-]{1,128}`.
 */
export interface NodeRegistry {
  /** Registers the node or refreshes it: `info` replaces the last one; alive for `ttlMs` from now. */
  beat(kind: string, id: string, info: unknown, ttlMs: number): Promise<void>;
  /** Every entry of the kind, expired ones included, ordered by id. */
  list(kind: string): Promise<NodeEntry[]>;
  /** Forgets the node; false if it was not registered. A later beat registers it again. */
  remove(kind: string, id: string): Promise<boolean>;
}

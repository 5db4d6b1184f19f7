import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Logger } from 'pino';
import { StoreError } from './errors.ts';
import { LocalBus } from './LocalBus.ts';
import { MemoryNodeRegistry } from './NodeRegistry.ts';
import { checkQueueName, cleanPatch, createdMs, decodeCursor, encodeCursor, pageLimit } from './paging.ts';
import { SlidingLogLimiter } from './SlidingLogLimiter.ts';
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
  DeliveryFilter,
  DeliverySettlement,
  Effects,
  JobQueue,
  LeasedDelivery,
  LeasedJob,
  NewJob,
  SongCreateResult,
  SongCreateRules,
  SongRepo,
  Store,
  StoreOptions,
  StreamRepo,
  WebhookRepo,
} from './Store.ts';

export interface EmbeddedStoreOptions extends StoreOptions {
  /** Directory for `reverie.db` (+ `-wal`, `-shm`); created if missing. */
  dataDir: string;
  /**
   * SQLite `synchronous` in WAL mode. `NORMAL` (default): a commit is in the WAL file before the
   * call returns, so a killed process (kill -9, OOM) loses nothing committed; only an OS crash or
   * power cut can drop the last few commits. `FULL` also fsyncs every commit (survives power
   * loss) at the cost of one fsync per write.
   */
  synchronous?: 'NORMAL' | 'FULL';
}

type Db = Database.Database;
type Row = Record<string, unknown>;

/** Schema steps; `PRAGMA user_version` is the number applied. Never edit a shipped step. */
const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE accounts (id TEXT PRIMARY KEY, doc TEXT NOT NULL);
  CREATE TABLE api_keys (digest TEXT PRIMARY KEY, account_id TEXT NOT NULL, doc TEXT NOT NULL);
  CREATE INDEX api_keys_account ON api_keys (account_id);

  -- seq: global creation order, the basis of queue positions.
  CREATE TABLE songs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    account_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    doc TEXT NOT NULL
  );
  CREATE INDEX songs_account_created ON songs (account_id, created_ms, id);
  CREATE INDEX songs_status_seq ON songs (status, seq);
  CREATE INDEX songs_account_status ON songs (account_id, status);
  CREATE TABLE usage (
    account_id TEXT NOT NULL, month TEXT NOT NULL, used INTEGER NOT NULL,
    PRIMARY KEY (account_id, month)
  ) WITHOUT ROWID;

  CREATE TABLE streams (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    state TEXT NOT NULL,
    deleted INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    stream_key TEXT NOT NULL UNIQUE,
    playback_id TEXT NOT NULL UNIQUE,
    doc TEXT NOT NULL
  );
  CREATE INDEX streams_account_created ON streams (account_id, deleted, created_ms, id);
  CREATE INDEX streams_state ON streams (state);

  CREATE TABLE endpoints (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, created_ms INTEGER NOT NULL, doc TEXT NOT NULL);
  CREATE INDEX endpoints_account_created ON endpoints (account_id, created_ms, id);
  CREATE TABLE deliveries (
    id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    stream_id TEXT,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    doc TEXT NOT NULL,
    UNIQUE (event_id, endpoint_id)
  );
  CREATE INDEX deliveries_endpoint_created ON deliveries (endpoint_id, created_ms, id);
  CREATE INDEX deliveries_created ON deliveries (created_ms);

  -- due_ms: run time while waiting (token NULL), lease expiry while leased; seq breaks ties FIFO.
  CREATE TABLE jobs (
    queue TEXT NOT NULL,
    id TEXT NOT NULL,
    payload TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    token TEXT,
    attempts INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (queue, id)
  );
  CREATE INDEX jobs_due ON jobs (queue, due_ms, seq);

  CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
  `,
  // Named counters of the CounterRepo, apart from the internal `counters` (job_seq).
  `CREATE TABLE named_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;`,
  // Attempts log of webhook deliveries: one row per send, deleted with its delivery.
  `CREATE TABLE delivery_attempts (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     delivery_id TEXT NOT NULL,
     doc TEXT NOT NULL
   );
   CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, seq);`,
  // The deliveries table becomes its own queue (Store DELIVERY_QUEUE): a pending delivery's
  // queue state lives in its row instead of a job row per delivery. due_ms: run time while
  // waiting (token NULL), lease expiry while leased, NULL once finished (so the partial index
  // holds only queued deliveries). leases: the job's attempts; job: its payload (NULL: none).
  // Jobs of the old queue move into their deliveries' rows.
  `ALTER TABLE deliveries ADD COLUMN due_ms INTEGER;
   ALTER TABLE deliveries ADD COLUMN token TEXT;
   ALTER TABLE deliveries ADD COLUMN leases INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE deliveries ADD COLUMN job TEXT;
   UPDATE deliveries SET
     due_ms = j.due_ms, token = j.token, leases = j.attempts, job = j.payload
   FROM (SELECT id, due_ms, token, attempts, payload FROM jobs WHERE queue = 'webhooks.deliver') AS j
   WHERE deliveries.id = j.id;
   DELETE FROM jobs WHERE queue = 'webhooks.deliver';
   CREATE INDEX deliveries_due ON deliveries (due_ms, id) WHERE due_ms IS NOT NULL;`,
];

function isConstraint(err: unknown): boolean {
  return typeof err === 'object' && err !== null && String((err as { code?: unknown }).code).startsWith('SQLITE_CONSTRAINT');
}

/** `createDeliveries`' `ack` option as a list. */
function ackList(ack: LeasedJob | readonly LeasedJob[] | undefined): readonly LeasedJob[] {
  if (ack === undefined) return [];
  return 'token' in ack ? [ack] : ack;
}

function parseDoc<T>(row: Row | undefined): T | null {
  return row ? (JSON.parse(row.doc as string) as T) : null;
}

/**
 * The default store: SQLite (better-sqlite3) in WAL mode under `dataDir`. One process owns it;
 * every multi-record change is one SQLite transaction, and since better-sqlite3 is synchronous no
 * other call interleaves with a transaction. Bus and rate limits live in memory (one process).
 */
/**
 * Memoises `db.prepare` by SQL text: compiling a statement costs more than running it, and every
 * repo method prepares its SQL inline. The SQL texts are a small fixed set, so the cache is bounded.
 * (Safe because every statement runs to completion synchronously; none is left iterating.)
 */
function cacheStatements(db: Db): void {
  const prepare = db.prepare.bind(db);
  const cache = new Map<string, ReturnType<Db['prepare']>>();
  db.prepare = ((sql: string) => {
    let stmt = cache.get(sql);
    if (!stmt) {
      stmt = prepare(sql);
      cache.set(sql, stmt);
    }
    return stmt;
  }) as Db['prepare'];
}

export class EmbeddedStore implements Store {
  readonly kind = 'embedded' as const;
  readonly accounts: AccountRepo;
  readonly songs: SongRepo;
  readonly streams: StreamRepo;
  readonly webhooks: WebhookRepo;
  readonly queue: JobQueue;
  readonly bus: LocalBus;
  readonly rateLimits: SlidingLogLimiter;
  readonly counters: CounterRepo;
  readonly nodes: MemoryNodeRegistry;

  private readonly db: Db;
  private readonly now: () => number;
  private readonly work = new WorkSignal();
  private closed = false;

  static open(options: EmbeddedStoreOptions): EmbeddedStore {
    mkdirSync(options.dataDir, { recursive: true });
    const db = new Database(path.join(options.dataDir, 'reverie.db'));
    try {
      db.pragma('journal_mode = WAL');
      db.pragma(`synchronous = ${options.synchronous ?? 'NORMAL'}`);
      // Another process (the CLI) may hold the write lock briefly.
      db.pragma('busy_timeout = 5000');
      migrate(db);
      cacheStatements(db);
    } catch (err) {
      db.close();
      throw err;
    }
    return new EmbeddedStore(db, options.now ?? Date.now, options.logger);
  }

  private constructor(db: Db, now: () => number, logger?: Logger) {
    this.db = db;
    this.now = now;
    this.bus = new LocalBus(logger);
    this.rateLimits = new SlidingLogLimiter(now);
    const jobs = new Jobs(db, now, this.work, () => this.assertOpen());
    this.queue = jobs;
    this.accounts = new Accounts(db);
    this.songs = new Songs(db, jobs);
    this.streams = new Streams(db, jobs);
    this.webhooks = new Webhooks(db, jobs, now);
    this.counters = new Counters(db, () => this.assertOpen());
    this.nodes = new MemoryNodeRegistry(now, () => this.assertOpen());
  }

  async ping(): Promise<void> {
    this.assertOpen();
    this.db.prepare('SELECT 1').get();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.work.close();
    this.bus.close();
    this.db.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreError('closed', 'store is closed');
  }
}

function migrate(db: Db): void {
  const version = db.pragma('user_version', { simple: true }) as number;
  for (let v = version; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v] as string);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}

// ───────────────────────────── jobs

class Jobs implements JobQueue {
  private readonly st;

  constructor(
    private readonly db: Db,
    private readonly now: () => number,
    private readonly work: WorkSignal,
    readonly assertOpen: () => void,
  ) {
    this.st = {
      nextSeq: db.prepare(
        `INSERT INTO counters (name, value) VALUES ('job_seq', 1)
         ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value`,
      ),
      insert: db.prepare(
        `INSERT INTO jobs (queue, id, payload, due_ms, token, attempts, seq) VALUES (?, ?, ?, ?, NULL, 0, ?)
         ON CONFLICT (queue, id) DO NOTHING`,
      ),
      nextMany: db.prepare(`SELECT id, payload, attempts FROM jobs WHERE queue = ? AND due_ms <= ? ORDER BY due_ms, seq LIMIT ?`),
      has: db.prepare(`SELECT 1 FROM jobs WHERE queue = ? AND id = ?`),
      lease: db.prepare(`UPDATE jobs SET token = ?, due_ms = ?, attempts = attempts + 1 WHERE queue = ? AND id = ?`),
      ack: db.prepare(`DELETE FROM jobs WHERE queue = ? AND id = ? AND token = ?`),
      retry: db.prepare(`UPDATE jobs SET token = NULL, due_ms = ?, seq = ? WHERE queue = ? AND id = ? AND token = ?`),
      defer: db.prepare(
        `UPDATE jobs SET token = NULL, due_ms = ?, seq = ?, attempts = MAX(attempts - 1, 0), payload = COALESCE(?, payload)
         WHERE queue = ? AND id = ? AND token = ?`,
      ),
      extend: db.prepare(`UPDATE jobs SET due_ms = ? WHERE queue = ? AND id = ? AND token = ?`),
      stats: db.prepare(
        `SELECT
           COALESCE(SUM(due_ms <= @now), 0) AS ready,
           COALESCE(SUM(token IS NULL AND due_ms > @now), 0) AS delayed,
           COALESCE(SUM(token IS NOT NULL AND due_ms > @now), 0) AS leased
         FROM jobs WHERE queue = @queue`,
      ),
    };
  }

  /** Inserts inside the caller's transaction; returns whether it was new. Call `notify` after commit. */
  insert(job: NewJob): boolean {
    checkQueueName(job.queue);
    const seq = (this.st.nextSeq.get() as { value: number }).value;
    const payload = JSON.stringify(job.payload) ?? 'null';
    const runAt = Math.round(job.runAtMs ?? this.now());
    return this.st.insert.run(job.queue, job.id, payload, runAt, seq).changes === 1;
  }

  notify(jobs: readonly NewJob[]): void {
    for (const queue of new Set(jobs.map((j) => j.queue))) this.work.notify(queue);
  }

  notifyQueue(queue: string): void {
    this.work.notify(queue);
  }

  async enqueue(job: NewJob): Promise<boolean> {
    this.assertOpen();
    const inserted = this.db.transaction(() => this.insert(job))();
    if (inserted) this.notify([job]);
    return inserted;
  }

  async lease(queue: string, leaseMs: number): Promise<LeasedJob | null> {
    return (await this.leaseMany(queue, 1, leaseMs))[0] ?? null;
  }

  async leaseMany(queue: string, max: number, leaseMs: number): Promise<LeasedJob[]> {
    this.assertOpen();
    checkQueueName(queue);
    return this.db.transaction((): LeasedJob[] => {
      const now = this.now();
      const rows = this.st.nextMany.all(queue, now, Math.max(1, Math.floor(max))) as { id: string; payload: string; attempts: number }[];
      const leasedUntilMs = now + Math.round(leaseMs);
      return rows.map((row) => {
        const token = randomUUID();
        this.st.lease.run(token, leasedUntilMs, queue, row.id);
        return { queue, id: row.id, payload: JSON.parse(row.payload), attempts: row.attempts + 1, token, leasedUntilMs };
      });
    })();
  }

  async has(queue: string, id: string): Promise<boolean> {
    this.assertOpen();
    return this.st.has.get(queue, id) !== undefined;
  }

  async ack(job: LeasedJob): Promise<boolean> {
    this.assertOpen();
    return this.ackSync(job);
  }

  /** Inside or outside a transaction. */
  ackSync(job: LeasedJob): boolean {
    return this.st.ack.run(job.queue, job.id, job.token).changes === 1;
  }

  async retry(job: LeasedJob, runAtMs: number): Promise<boolean> {
    this.assertOpen();
    const done = this.db.transaction(() => this.releaseSync(job, runAtMs, true))();
    if (done) this.work.notify(job.queue);
    return done;
  }

  async defer(job: LeasedJob, runAtMs: number, payload?: unknown): Promise<boolean> {
    this.assertOpen();
    const done = this.db.transaction(() => this.releaseSync(job, runAtMs, false, payload))();
    if (done) this.work.notify(job.queue);
    return done;
  }

  /**
   * Inside the caller's transaction: back to waiting at `runAtMs`, behind jobs already waiting
   * for that time; an uncounted release gives the lease's attempt back. Call `notify` after commit.
   */
  releaseSync(job: LeasedJob, runAtMs: number, counted: boolean, payload?: unknown): boolean {
    const seq = (this.st.nextSeq.get() as { value: number }).value;
    const runAt = Math.round(runAtMs);
    if (counted) return this.st.retry.run(runAt, seq, job.queue, job.id, job.token).changes === 1;
    const json = payload === undefined ? null : (JSON.stringify(payload) ?? 'null');
    return this.st.defer.run(runAt, seq, json, job.queue, job.id, job.token).changes === 1;
  }

  async extend(job: LeasedJob, leaseMs: number): Promise<boolean> {
    this.assertOpen();
    return this.st.extend.run(this.now() + Math.round(leaseMs), job.queue, job.id, job.token).changes === 1;
  }

  async stats(queue: string): Promise<{ ready: number; delayed: number; leased: number }> {
    this.assertOpen();
    const row = this.st.stats.get({ queue, now: this.now() }) as { ready: number; delayed: number; leased: number };
    return { ready: row.ready, delayed: row.delayed, leased: row.leased };
  }

  waitForWork(queue: string, maxWaitMs: number, signal?: AbortSignal): Promise<void> {
    return this.work.wait(queue, maxWaitMs, signal);
  }
}

// ───────────────────────────── accounts

class Accounts implements AccountRepo {
  constructor(private readonly db: Db) {}

  async create(account: Account): Promise<void> {
    try {
      this.db.prepare('INSERT INTO accounts (id, doc) VALUES (?, ?)').run(account.id, JSON.stringify(account));
    } catch (err) {
      if (isConstraint(err)) throw new StoreError('conflict', `account exists [accountId:${account.id}]`, { cause: err });
      throw err;
    }
  }

  async get(id: string): Promise<Account | null> {
    return parseDoc<Account>(this.db.prepare('SELECT doc FROM accounts WHERE id = ?').get(id) as Row | undefined);
  }

  async setPlan(id: string, plan: Account['plan']): Promise<void> {
    this.db.transaction(() => {
      const account = parseDoc<Account>(this.db.prepare('SELECT doc FROM accounts WHERE id = ?').get(id) as Row | undefined);
      if (!account) return;
      this.db.prepare('UPDATE accounts SET doc = ? WHERE id = ?').run(JSON.stringify({ ...account, plan }), id);
    })();
  }

  async setAdmission(id: string, admission: Account['admission']): Promise<void> {
    this.db.transaction(() => {
      const account = parseDoc<Account>(this.db.prepare('SELECT doc FROM accounts WHERE id = ?').get(id) as Row | undefined);
      if (!account) return;
      this.db.prepare('UPDATE accounts SET doc = ? WHERE id = ?').run(JSON.stringify({ ...account, admission: admission ?? null }), id);
    })();
  }

  async addKey(key: ApiKeyRecord): Promise<void> {
    try {
      this.db
        .prepare('INSERT INTO api_keys (digest, account_id, doc) VALUES (?, ?, ?)')
        .run(key.digest, key.accountId, JSON.stringify(key));
    } catch (err) {
      if (isConstraint(err)) throw new StoreError('conflict', `key digest exists [accountId:${key.accountId}]`, { cause: err });
      throw err;
    }
  }

  async findKey(digest: string): Promise<ApiKeyRecord | null> {
    return parseDoc<ApiKeyRecord>(this.db.prepare('SELECT doc FROM api_keys WHERE digest = ?').get(digest) as Row | undefined);
  }

  async count(): Promise<number> {
    return (this.db.prepare('SELECT COUNT(*) AS n FROM accounts').get() as { n: number }).n;
  }
}

// ───────────────────────────── paging

/**
 * Newest-first page over `table` rows matching `where`. The tuple (created_ms, id) orders rows;
 * one row past `limit` tells whether there is a next page.
 */
function pageRows<T>(db: Db, table: string, where: string, params: unknown[], page: PageRequest): Page<T> {
  const limit = pageLimit(page.limit);
  let sql = `SELECT id, created_ms, doc FROM ${table} WHERE ${where}`;
  const args = [...params];
  if (page.cursor) {
    const { ms, id } = decodeCursor(page.cursor);
    sql += ' AND (created_ms < ? OR (created_ms = ? AND id < ?))';
    args.push(ms, ms, id);
  }
  sql += ' ORDER BY created_ms DESC, id DESC LIMIT ?';
  args.push(limit + 1);
  const rows = db.prepare(sql).all(...args) as { id: string; created_ms: number; doc: string }[];
  const more = rows.length > limit;
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return {
    items: items.map((r) => JSON.parse(r.doc) as T),
    nextCursor: more && last ? encodeCursor(last.created_ms, last.id) : null,
  };
}

// ───────────────────────────── songs

class Songs implements SongRepo {
  constructor(
    private readonly db: Db,
    private readonly jobs: Jobs,
  ) {}

  async create(song: SongRecord, rules: SongCreateRules, effects?: Effects): Promise<SongCreateResult> {
    this.jobs.assertOpen();
    const record: SongRecord = { ...song, status: 'queued' };
    const ms = createdMs(record.createdAt);
    const result = this.db.transaction((): SongCreateResult => {
      const used = this.usedNow(record.accountId, rules.month);
      if (rules.monthlyLimit !== null && used >= rules.monthlyLimit) {
        return { ok: false, reason: 'quota', used, limit: rules.monthlyLimit };
      }
      const active = this.activeNow(record.accountId);
      if (active >= rules.maxActive) return { ok: false, reason: 'busy', active };
      let seq: number;
      try {
        seq = Number(
          this.db
            .prepare('INSERT INTO songs (id, account_id, status, created_ms, doc) VALUES (?, ?, ?, ?, ?)')
            .run(record.id, record.accountId, 'queued', ms, JSON.stringify(record)).lastInsertRowid,
        );
      } catch (err) {
        if (isConstraint(err)) throw new StoreError('conflict', `song exists [songId:${record.id}]`, { cause: err });
        throw err;
      }
      this.db
        .prepare(
          `INSERT INTO usage (account_id, month, used) VALUES (?, ?, 1)
           ON CONFLICT (account_id, month) DO UPDATE SET used = used + 1`,
        )
        .run(record.accountId, rules.month);
      for (const job of effects?.jobs ?? []) this.jobs.insert(job);
      const position = (
        this.db.prepare(`SELECT COUNT(*) AS n FROM songs WHERE status = 'queued' AND seq <= ?`).get(seq) as { n: number }
      ).n;
      return { ok: true, song: record, position };
    })();
    if (result.ok) this.jobs.notify(effects?.jobs ?? []);
    return result;
  }

  async get(id: string): Promise<SongRecord | null> {
    if (!isRecordId('sng', id)) return null;
    return this.getSync(id);
  }

  private getSync(id: string): SongRecord | null {
    return parseDoc<SongRecord>(this.db.prepare('SELECT doc FROM songs WHERE id = ?').get(id) as Row | undefined);
  }

  async list(accountId: string, page: PageRequest): Promise<Page<SongRecord>> {
    return pageRows<SongRecord>(this.db, 'songs', 'account_id = ?', [accountId], page);
  }

  async update(id: string, patch: Partial<Omit<SongRecord, 'id' | 'accountId' | 'createdAt'>>): Promise<SongRecord | null> {
    const clean = cleanPatch(patch, ['id', 'accountId', 'createdAt']);
    return this.db.transaction((): SongRecord | null => {
      const song = this.getSync(id);
      if (!song) return null;
      const next: SongRecord = { ...song, ...clean };
      this.db.prepare('UPDATE songs SET status = ?, doc = ? WHERE id = ?').run(next.status, JSON.stringify(next), id);
      return next;
    })();
  }

  async fail(id: string, error: SongRecord['error'], finishedAt: string): Promise<SongRecord | null> {
    return this.db.transaction((): SongRecord | null => {
      const song = this.getSync(id);
      if (!song) return null;
      if (song.status === 'failed') return song;
      const next: SongRecord = { ...song, status: 'failed', error, finishedAt };
      this.db.prepare(`UPDATE songs SET status = 'failed', doc = ? WHERE id = ?`).run(JSON.stringify(next), id);
      this.db
        .prepare('UPDATE usage SET used = used - 1 WHERE account_id = ? AND month = ? AND used > 0')
        .run(song.accountId, song.usageMonth);
      return next;
    })();
  }

  async position(id: string): Promise<number | null> {
    const row = this.db
      .prepare(
        `SELECT (SELECT COUNT(*) FROM songs q WHERE q.status = 'queued' AND q.seq <= s.seq) AS n
         FROM songs s WHERE s.id = ? AND s.status = 'queued'`,
      )
      .get(id) as { n: number } | undefined;
    return row ? row.n : null;
  }

  async used(accountId: string, month: string): Promise<number> {
    return this.usedNow(accountId, month);
  }

  async active(accountId: string): Promise<number> {
    return this.activeNow(accountId);
  }

  private usedNow(accountId: string, month: string): number {
    const row = this.db.prepare('SELECT used FROM usage WHERE account_id = ? AND month = ?').get(accountId, month) as
      | { used: number }
      | undefined;
    return row?.used ?? 0;
  }

  private activeNow(accountId: string): number {
    return (
      this.db
        .prepare(`SELECT COUNT(*) AS n FROM songs WHERE account_id = ? AND status IN ('queued', 'rendering')`)
        .get(accountId) as { n: number }
    ).n;
  }
}

// ───────────────────────────── streams

class Streams implements StreamRepo {
  constructor(
    private readonly db: Db,
    private readonly jobs: Jobs,
  ) {}

  async create(stream: StreamRecord): Promise<void> {
    this.jobs.assertOpen();
    try {
      this.db
        .prepare(
          `INSERT INTO streams (id, account_id, state, deleted, created_ms, stream_key, playback_id, doc)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        )
        .run(
          stream.id,
          stream.accountId,
          stream.state,
          stream.deleted ? 1 : 0,
          createdMs(stream.createdAt),
          stream.streamKey,
          stream.playbackId,
          JSON.stringify(stream),
        );
    } catch (err) {
      if (isConstraint(err)) throw new StoreError('conflict', `stream id, key or playback id taken [streamId:${stream.id}]`, { cause: err });
      throw err;
    }
  }

  async get(id: string): Promise<StreamRecord | null> {
    if (!isRecordId('str', id)) return null;
    return this.getSync(id);
  }

  private getSync(id: string): StreamRecord | null {
    return parseDoc<StreamRecord>(this.db.prepare('SELECT doc FROM streams WHERE id = ?').get(id) as Row | undefined);
  }

  async getByKey(streamKey: string): Promise<StreamRecord | null> {
    return parseDoc<StreamRecord>(this.db.prepare('SELECT doc FROM streams WHERE stream_key = ?').get(streamKey) as Row | undefined);
  }

  async getByPlaybackId(playbackId: string): Promise<StreamRecord | null> {
    return parseDoc<StreamRecord>(
      this.db.prepare('SELECT doc FROM streams WHERE playback_id = ?').get(playbackId) as Row | undefined,
    );
  }

  async list(accountId: string, page: PageRequest): Promise<Page<StreamRecord>> {
    return pageRows<StreamRecord>(this.db, 'streams', 'account_id = ? AND deleted = 0', [accountId], page);
  }

  async update(
    id: string,
    patch: Partial<Omit<StreamRecord, 'id' | 'accountId' | 'createdAt'>>,
    opts?: { fromStates?: StreamRecord['state'][]; effects?: Effects },
  ): Promise<StreamRecord | null> {
    this.jobs.assertOpen();
    const clean = cleanPatch(patch, ['id', 'accountId', 'createdAt']);
    const jobs = opts?.effects?.jobs ?? [];
    const next = this.db.transaction((): StreamRecord | null => {
      const stream = this.getSync(id);
      if (!stream) return null;
      if (opts?.fromStates && !opts.fromStates.includes(stream.state)) return null;
      const next: StreamRecord = { ...stream, ...clean };
      try {
        this.db
          .prepare('UPDATE streams SET state = ?, deleted = ?, stream_key = ?, playback_id = ?, doc = ? WHERE id = ?')
          .run(next.state, next.deleted ? 1 : 0, next.streamKey, next.playbackId, JSON.stringify(next), id);
      } catch (err) {
        if (isConstraint(err)) throw new StoreError('conflict', `stream key or playback id taken [streamId:${id}]`, { cause: err });
        throw err;
      }
      for (const job of jobs) this.jobs.insert(job);
      return next;
    })();
    if (next) this.jobs.notify(jobs);
    return next;
  }

  async listByState(states: StreamRecord['state'][]): Promise<StreamRecord[]> {
    if (states.length === 0) return [];
    const rows = this.db
      .prepare(`SELECT doc FROM streams WHERE state IN (${states.map(() => '?').join(', ')}) ORDER BY created_ms, id`)
      .all(...states) as Row[];
    return rows.map((r) => JSON.parse(r.doc as string) as StreamRecord);
  }
}

// ───────────────────────────── webhooks

class Webhooks implements WebhookRepo {
  constructor(
    private readonly db: Db,
    private readonly jobs: Jobs,
    private readonly now: () => number,
  ) {}

  async createEndpoint(endpoint: WebhookEndpointRecord, maxPerAccount: number): Promise<boolean> {
    this.jobs.assertOpen();
    const ms = createdMs(endpoint.createdAt);
    return this.db.transaction((): boolean => {
      const { n } = this.db.prepare('SELECT COUNT(*) AS n FROM endpoints WHERE account_id = ?').get(endpoint.accountId) as {
        n: number;
      };
      if (n >= maxPerAccount) return false;
      try {
        this.db
          .prepare('INSERT INTO endpoints (id, account_id, created_ms, doc) VALUES (?, ?, ?, ?)')
          .run(endpoint.id, endpoint.accountId, ms, JSON.stringify(endpoint));
      } catch (err) {
        if (isConstraint(err)) throw new StoreError('conflict', `endpoint exists [endpointId:${endpoint.id}]`, { cause: err });
        throw err;
      }
      return true;
    })();
  }

  async getEndpoint(id: string): Promise<WebhookEndpointRecord | null> {
    if (!isRecordId('whk', id)) return null;
    return this.endpointSync(id);
  }

  private endpointSync(id: string): WebhookEndpointRecord | null {
    return parseDoc<WebhookEndpointRecord>(this.db.prepare('SELECT doc FROM endpoints WHERE id = ?').get(id) as Row | undefined);
  }

  async listEndpoints(accountId: string): Promise<WebhookEndpointRecord[]> {
    const rows = this.db
      .prepare('SELECT doc FROM endpoints WHERE account_id = ? ORDER BY created_ms, id')
      .all(accountId) as Row[];
    return rows.map((r) => JSON.parse(r.doc as string) as WebhookEndpointRecord);
  }

  async updateEndpoint(
    id: string,
    patch: Partial<Omit<WebhookEndpointRecord, 'id' | 'accountId' | 'createdAt'>>,
  ): Promise<WebhookEndpointRecord | null> {
    const clean = cleanPatch(patch, ['id', 'accountId', 'createdAt']);
    return this.db.transaction((): WebhookEndpointRecord | null => {
      const endpoint = this.endpointSync(id);
      if (!endpoint) return null;
      const next: WebhookEndpointRecord = { ...endpoint, ...clean };
      this.db.prepare('UPDATE endpoints SET doc = ? WHERE id = ?').run(JSON.stringify(next), id);
      return next;
    })();
  }

  async deleteEndpoint(id: string): Promise<boolean> {
    return this.db.transaction((): boolean => {
      this.db
        .prepare('DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE endpoint_id = ?)')
        .run(id);
      this.db.prepare('DELETE FROM deliveries WHERE endpoint_id = ?').run(id);
      return this.db.prepare('DELETE FROM endpoints WHERE id = ?').run(id).changes === 1;
    })();
  }

  async recordOutcome(id: string, success: boolean, disableAt: number): Promise<WebhookEndpointRecord | null> {
    return this.db.transaction((): WebhookEndpointRecord | null => {
      const endpoint = this.endpointSync(id);
      if (!endpoint) return null;
      const failures = success ? 0 : endpoint.consecutiveFailures + 1;
      const next: WebhookEndpointRecord = {
        ...endpoint,
        consecutiveFailures: failures,
        isActive: !success && failures >= disableAt ? false : endpoint.isActive,
      };
      this.db.prepare('UPDATE endpoints SET doc = ? WHERE id = ?').run(JSON.stringify(next), id);
      return next;
    })();
  }

  async createDeliveries(
    deliveries: WebhookDeliveryRecord[],
    opts?: { ack?: LeasedJob | readonly LeasedJob[] },
  ): Promise<WebhookDeliveryRecord[]> {
    this.jobs.assertOpen();
    const acks = ackList(opts?.ack);
    const now = this.now();
    const insert = this.db.prepare(
      `INSERT INTO deliveries (id, endpoint_id, event_id, event_type, stream_id, status, created_ms, doc, due_ms, token, leases, job)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0, NULL) ON CONFLICT (event_id, endpoint_id) DO NOTHING`,
    );
    const inserted = this.db.transaction(() => {
      const out: WebhookDeliveryRecord[] = [];
      for (const d of deliveries) {
        const due = d.status !== 'pending' ? null : d.nextAttemptAt === null ? now : Date.parse(d.nextAttemptAt);
        let changes: number;
        try {
          changes = insert.run(d.id, d.endpointId, d.eventId, d.eventType, d.streamId, d.status, createdMs(d.createdAt), JSON.stringify(d), due).changes;
        } catch (err) {
          if (isConstraint(err)) throw new StoreError('conflict', `delivery exists [deliveryId:${d.id}]`, { cause: err });
          throw err;
        }
        if (changes === 1) out.push(d);
      }
      for (const job of acks) this.jobs.ackSync(job);
      return out;
    })();
    if (inserted.some((d) => d.status === 'pending')) this.jobs.notifyQueue(DELIVERY_QUEUE);
    return inserted;
  }

  async getDelivery(id: string): Promise<WebhookDeliveryRecord | null> {
    if (!isRecordId('dlv', id)) return null;
    return this.deliverySync(id);
  }

  async findDelivery(eventId: string, endpointId: string): Promise<WebhookDeliveryRecord | null> {
    return parseDoc<WebhookDeliveryRecord>(
      this.db.prepare('SELECT doc FROM deliveries WHERE event_id = ? AND endpoint_id = ?').get(eventId, endpointId) as Row | undefined,
    );
  }

  async settleDeliveries(items: readonly DeliverySettlement[]): Promise<void> {
    await this.leaseDeliveries(0, 0, items);
  }

  async leaseDeliveries(max: number, leaseMs: number, settle: readonly DeliverySettlement[] = []): Promise<LeasedDelivery[]> {
    this.jobs.assertOpen();
    const n = Math.max(0, Math.floor(max));
    if (n === 0 && settle.length === 0) return [];
    const settleOne = this.db.prepare(
      // Every SET expression reads the row as it was, so each CASE sees the lease's old token.
      `UPDATE deliveries SET
         event_type = @eventType, stream_id = @streamId, status = @status, doc = @doc,
         due_ms = CASE WHEN token = @token THEN @due ELSE due_ms END,
         leases = CASE WHEN token = @token AND @uncounted THEN MAX(leases - 1, 0) ELSE leases END,
         job = CASE WHEN token = @token AND @job IS NOT NULL THEN @job ELSE job END,
         token = CASE WHEN token = @token THEN NULL ELSE token END
       WHERE id = @id`,
    );
    const due = this.db.prepare('SELECT id, doc, leases, job FROM deliveries WHERE due_ms <= ? ORDER BY due_ms, id LIMIT ?');
    const lease = this.db.prepare('UPDATE deliveries SET token = ?, due_ms = ?, leases = leases + 1 WHERE id = ?');
    const leased = this.db.transaction((): LeasedDelivery[] => {
      for (const item of settle) {
        const delivery = this.deliverySync(item.deliveryId);
        if (!delivery) continue;
        const next: WebhookDeliveryRecord = {
          ...delivery,
          ...cleanPatch(item.patch, ['id', 'endpointId', 'accountId', 'eventId', 'createdAt']),
        };
        const r = item.release;
        settleOne.run({
          id: item.deliveryId,
          eventType: next.eventType,
          streamId: next.streamId,
          status: next.status,
          doc: JSON.stringify(next),
          token: item.job.token,
          due: r === undefined ? null : Math.round(r.atMs),
          uncounted: r !== undefined && !r.counted ? 1 : 0,
          job: r?.payload === undefined || r.counted ? null : (JSON.stringify(r.payload) ?? 'null'),
        });
        if (item.log && item.log.attempt.deliveryId === item.deliveryId) this.appendAttemptSync(item.log.attempt, item.log.keep);
      }
      if (n === 0) return [];
      const now = this.now();
      const leasedUntilMs = now + Math.round(leaseMs);
      const rows = due.all(now, n) as { id: string; doc: string; leases: number; job: string | null }[];
      return rows.map((row) => {
        const token = randomUUID();
        lease.run(token, leasedUntilMs, row.id);
        const job: LeasedJob = {
          queue: DELIVERY_QUEUE,
          id: row.id,
          payload: row.job === null ? null : JSON.parse(row.job),
          attempts: row.leases + 1,
          token,
          leasedUntilMs,
        };
        return { delivery: JSON.parse(row.doc) as WebhookDeliveryRecord, job };
      });
    })();
    if (settle.some((i) => i.release)) this.jobs.notifyQueue(DELIVERY_QUEUE);
    return leased;
  }

  async deliveryQueueStats(): Promise<{ ready: number; delayed: number; leased: number }> {
    this.jobs.assertOpen();
    const row = this.db
      .prepare(
        `SELECT
           COALESCE(SUM(due_ms <= @now), 0) AS ready,
           COALESCE(SUM(token IS NULL AND due_ms > @now), 0) AS delayed,
           COALESCE(SUM(token IS NOT NULL AND due_ms > @now), 0) AS leased
         FROM deliveries WHERE due_ms IS NOT NULL`,
      )
      .get({ now: this.now() }) as { ready: number; delayed: number; leased: number };
    return { ready: row.ready, delayed: row.delayed, leased: row.leased };
  }

  private deliverySync(id: string): WebhookDeliveryRecord | null {
    return parseDoc<WebhookDeliveryRecord>(this.db.prepare('SELECT doc FROM deliveries WHERE id = ?').get(id) as Row | undefined);
  }

  async updateDelivery(
    id: string,
    patch: Partial<Omit<WebhookDeliveryRecord, 'id' | 'endpointId' | 'accountId' | 'eventId' | 'createdAt'>>,
    log?: { attempt: WebhookAttemptRecord; keep: number },
  ): Promise<WebhookDeliveryRecord | null> {
    const clean = cleanPatch(patch, ['id', 'endpointId', 'accountId', 'eventId', 'createdAt']);
    return this.db.transaction(() => this.updateDeliverySync(id, clean, log))();
  }

  /** With `log`, appends the attempt (same transaction as the caller's) when it is this delivery's. */
  private updateDeliverySync(
    id: string,
    clean: Partial<WebhookDeliveryRecord>,
    log?: { attempt: WebhookAttemptRecord; keep: number },
  ): WebhookDeliveryRecord | null {
    const delivery = this.deliverySync(id);
    if (!delivery) return null;
    const next: WebhookDeliveryRecord = { ...delivery, ...clean };
    this.db
      .prepare('UPDATE deliveries SET event_type = ?, stream_id = ?, status = ?, doc = ? WHERE id = ?')
      .run(next.eventType, next.streamId, next.status, JSON.stringify(next), id);
    if (log && log.attempt.deliveryId === id) this.appendAttemptSync(log.attempt, log.keep);
    return next;
  }

  async listDeliveries(endpointId: string, filter: DeliveryFilter, page: PageRequest): Promise<Page<WebhookDeliveryRecord>> {
    let where = 'endpoint_id = ?';
    const params: unknown[] = [endpointId];
    if (filter.status !== undefined) {
      where += ' AND status = ?';
      params.push(filter.status);
    }
    if (filter.eventType !== undefined) {
      where += ' AND event_type = ?';
      params.push(filter.eventType);
    }
    if (filter.streamId !== undefined) {
      where += ' AND stream_id = ?';
      params.push(filter.streamId);
    }
    if (filter.createdFrom !== undefined) {
      where += ' AND created_ms >= ?';
      params.push(createdMs(filter.createdFrom));
    }
    if (filter.createdBefore !== undefined) {
      where += ' AND created_ms < ?';
      params.push(createdMs(filter.createdBefore));
    }
    return pageRows<WebhookDeliveryRecord>(this.db, 'deliveries', where, params, page);
  }

  async purgeDeliveries(beforeIso: string): Promise<number> {
    const before = createdMs(beforeIso);
    return this.db.transaction((): number => {
      this.db
        .prepare('DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE created_ms < ?)')
        .run(before);
      return this.db.prepare('DELETE FROM deliveries WHERE created_ms < ?').run(before).changes;
    })();
  }

  async requeueDelivery(
    id: string,
    patch: Partial<Omit<WebhookDeliveryRecord, 'id' | 'endpointId' | 'accountId' | 'eventId' | 'createdAt'>>,
    queued: { payload: unknown; runAtMs: number },
  ): Promise<WebhookDeliveryRecord | null> {
    this.jobs.assertOpen();
    const clean = cleanPatch(patch, ['id', 'endpointId', 'accountId', 'eventId', 'createdAt']);
    const next = this.db.transaction((): WebhookDeliveryRecord | null => {
      const delivery = this.deliverySync(id);
      if (!delivery || delivery.status === 'pending') return null;
      const updated: WebhookDeliveryRecord = { ...delivery, ...clean };
      this.db
        .prepare(
          `UPDATE deliveries SET event_type = ?, stream_id = ?, status = ?, doc = ?, due_ms = ?, token = NULL, leases = 0, job = ?
           WHERE id = ?`,
        )
        .run(
          updated.eventType,
          updated.streamId,
          updated.status,
          JSON.stringify(updated),
          Math.round(queued.runAtMs),
          JSON.stringify(queued.payload) ?? 'null',
          id,
        );
      return updated;
    })();
    if (next) this.jobs.notifyQueue(DELIVERY_QUEUE);
    return next;
  }

  async addAttempt(attempt: WebhookAttemptRecord, keep: number): Promise<void> {
    this.jobs.assertOpen();
    this.db.transaction(() => {
      if (!this.db.prepare('SELECT 1 FROM deliveries WHERE id = ?').get(attempt.deliveryId)) return;
      this.appendAttemptSync(attempt, keep);
    })();
  }

  /** Inside the caller's transaction: appends, then drops what is older than the newest `keep`. */
  private appendAttemptSync(attempt: WebhookAttemptRecord, keep: number): void {
    this.db.prepare('INSERT INTO delivery_attempts (delivery_id, doc) VALUES (?, ?)').run(attempt.deliveryId, JSON.stringify(attempt));
    const n = Math.max(1, Math.floor(keep));
    // The common case (a log under its cap) costs one index count and no delete.
    const { c } = this.db.prepare('SELECT COUNT(*) AS c FROM delivery_attempts WHERE delivery_id = ?').get(attempt.deliveryId) as { c: number };
    if (c <= n) return;
    this.db
      .prepare(
        `DELETE FROM delivery_attempts WHERE delivery_id = ? AND seq <
           (SELECT seq FROM delivery_attempts WHERE delivery_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`,
      )
      .run(attempt.deliveryId, attempt.deliveryId, n - 1);
  }

  async listAttempts(deliveryId: string): Promise<WebhookAttemptRecord[]> {
    const rows = this.db.prepare('SELECT doc FROM delivery_attempts WHERE delivery_id = ? ORDER BY seq').all(deliveryId) as Row[];
    return rows.map((r) => JSON.parse(r.doc as string) as WebhookAttemptRecord);
  }
}

// ───────────────────────────── counters

class Counters implements CounterRepo {
  private readonly st;

  constructor(
    db: Db,
    private readonly assertOpen: () => void,
  ) {
    this.st = {
      add: db.prepare(
        `INSERT INTO named_counters (name, value) VALUES (?, ?)
         ON CONFLICT (name) DO UPDATE SET value = value + excluded.value RETURNING value`,
      ),
      get: db.prepare('SELECT value FROM named_counters WHERE name = ?'),
    };
  }

  async add(name: string, delta: number): Promise<number> {
    this.assertOpen();
    if (!Number.isSafeInteger(delta)) throw new StoreError('invalid_argument', `counter delta must be an integer [name:${name}]`);
    return (this.st.add.get(name, delta) as { value: number }).value;
  }

  async get(name: string): Promise<number> {
    this.assertOpen();
    return ((this.st.get.get(name) as { value: number } | undefined)?.value ?? 0);
  }
}

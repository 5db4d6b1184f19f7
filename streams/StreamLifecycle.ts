/**
 * The stream supervisor (spec "Stream session and webhook lifecycle"):
 *
 *   created ──node started──► started ──no signal for the window (timeout)──► ended
 *                               │  ├──DELETE (deleted)────────────────────────► ended
 *                               │  └──monthly streaming allowance used up (credits_exhausted)──► ended
 *   ended ──node started (reconnect)──► started (a fresh stream.started)
 *
 * Every transition is a compare-and-set on the stream's state (`fromStates`) that writes its
 * webhook event in the same store call (`effects.jobs`: the outbox), so two detectors — two
 * sweeping workers, a sweep racing a DELETE — can never both end one session, and an event exists
 * exactly when its transition does.
 *
 * Signals: the node's `started` (first output frame), `live` heartbeats and `ended` (publisher
 * gone) all move `lastLiveAt`, the last moment the stream was confirmed live. A periodic sweep ends
 * sessions whose last signal is older than the window; `ended_at` is that last signal (backdated
 * past the detection delay). A publisher that reconnects within the window continues its session.
 * Silence during a store outage does not count (signals could not be recorded): the window runs
 * from the end of the outage at the earliest (OutageClock).
 *
 * The clock and the timer are injectable so tests move time instead of waiting.
 */
import type { Logger } from 'pino';
import type { Plan, Store, StreamEndReason, StreamRecord } from '../store/index.ts';
import { streamEndedEvent, streamStartedEvent, webhookEventJob } from '../webhooks/index.ts';
import type { MediaNodeClient, NodeEvent } from './MediaNodeClient.ts';
import { OutageClock } from './OutageClock.ts';

/**
 * Monthly streaming allowance per plan, in seconds of live output (null = unlimited). Counted per
 * calendar month (UTC) of the moment a session's time is counted. See docs/api.md.
 */
export const STREAMING_ALLOWANCE_SECONDS: Readonly<Record<Plan, number | null>> = {
  anonymous: 10 * 60,
  free: 60 * 60,
  songs: 60 * 60,
  pro: 50 * 3600,
  max: 500 * 3600,
  internal: null,
};

/**
 * Streams an account may have live at once, per plan (null = no limit): one account cannot take a
 * media node's capacity from the others. Checked when a publisher attaches. See docs/api.md.
 */
export const LIVE_STREAMS_PER_PLAN: Readonly<Record<Plan, number | null>> = {
  anonymous: 1,
  free: 2,
  songs: 2,
  pro: 10,
  max: 50,
  internal: null,
};

export interface LifecycleClock {
  now(): number;
  setInterval(fn: () => void, ms: number): unknown;
  clearInterval(handle: unknown): void;
}

export const REAL_CLOCK: LifecycleClock = {
  now: () => Date.now(),
  setInterval: (fn, ms) => setInterval(fn, ms),
  clearInterval: (h) => clearInterval(h as NodeJS.Timeout),
};

export interface StreamLifecycleOptions {
  store: Store;
  media: MediaNodeClient;
  logger: Logger;
  clock?: LifecycleClock;
  /**
   * ms without a signal after which a session ends with `timeout`. Default 40 000: with the sweep
   * every 5 000 ms an end is detected at most 45 s after the last signal (spec "Limits").
   */
  timeoutMs?: number;
  /** ms between sweeps. Default 5 000. */
  sweepIntervalMs?: number;
  allowances?: Readonly<Record<Plan, number | null>>;
}

export const LIFECYCLE_DEFAULTS = { timeoutMs: 40_000, sweepIntervalMs: 5_000 } as const;

/** `YYYY-MM` (UTC). */
export function usageMonth(ms: number): string {
  return new Date(ms).toISOString().slice(0, 7);
}

/** Counter of streaming seconds counted for an account in a month. */
export function usageCounter(accountId: string, month: string): string {
  return `stream_seconds:${accountId}:${month}`;
}

const ms = (iso: string | null): number | null => (iso === null ? null : Date.parse(iso));

/**
 * Ends a `started` session (CAS from `started`), writing `stream.ended` with it, and counts the
 * session's seconds against the account's month. `endedAtMs` is the last moment the stream was
 * confirmed live. Returns the ended record, or null when another detector ended it first.
 * `extra` rides along in the same update (DELETE sets `deleted`).
 */
export async function endSession(
  store: Store,
  stream: StreamRecord,
  reason: StreamEndReason,
  endedAtMs: number,
  nowMs: number,
  extra: Partial<Pick<StreamRecord, 'deleted' | 'deletedAt'>> = {},
): Promise<StreamRecord | null> {
  const startedMs = ms(stream.startedAt) ?? ms(stream.createdAt) ?? endedAtMs;
  const endedAt = new Date(Math.max(endedAtMs, startedMs)).toISOString();
  const after: StreamRecord = { ...stream, ...extra, state: 'ended', endedAt, endReason: reason, updatedAt: new Date(nowMs).toISOString() };
  const eventSeq = (stream.eventSeq ?? 0) + 1;
  const event = streamEndedEvent(after, { nowMs, sequence: eventSeq });
  // Webhooks never deliver this before the session's stream.started (docs/webhooks.md "Order").
  const job = webhookEventJob(event, stream.accountId, stream.startedEventId !== undefined ? { after: stream.startedEventId } : {});
  const ended = await store.streams.update(
    stream.id,
    { ...extra, state: 'ended', endedAt, endReason: reason, updatedAt: after.updatedAt, eventSeq },
    { fromStates: ['started'], effects: { jobs: [job] } },
  );
  if (ended && event.type === 'stream.ended') {
    // Counted after the CAS, so only the winner counts. A crash between the two loses at most one
    // session's seconds from the allowance (never the event): documented in docs/api.md.
    await store.counters.add(usageCounter(stream.accountId, usageMonth(endedAtMs)), event.data.duration_seconds);
  }
  return ended;
}

/**
 * Streaming seconds the account has used this month: counted sessions plus the running time of
 * its live sessions (from their start, or the month's start if later).
 */
export async function streamingUsed(store: Store, accountId: string, live: readonly StreamRecord[], nowMs: number): Promise<number> {
  const month = usageMonth(nowMs);
  const monthStart = Date.parse(`${month}-01T00:00:00.000Z`);
  let used = await store.counters.get(usageCounter(accountId, month));
  for (const s of live) {
    if (s.accountId !== accountId || s.state !== 'started') continue;
    const from = Math.max(ms(s.startedAt) ?? nowMs, monthStart);
    used += Math.max(0, Math.floor((nowMs - from) / 1000));
  }
  return used;
}

export class StreamLifecycle {
  readonly #store: Store;
  readonly #media: MediaNodeClient;
  readonly #log: Logger;
  readonly #clock: LifecycleClock;
  readonly #timeoutMs: number;
  readonly #sweepIntervalMs: number;
  readonly #allowances: Readonly<Record<Plan, number | null>>;
  #timer: unknown = null;
  #unsubscribe: (() => Promise<void>) | null = null;
  #sweeping: Promise<void> | null = null;
  /** Event handling in arrival order per stream (a `live` must not overtake its `started`). */
  readonly #chains = new Map<string, Promise<void>>();
  #closing: Promise<void> | null = null;
  readonly #outage: OutageClock;

  constructor(opts: StreamLifecycleOptions) {
    this.#store = opts.store;
    this.#media = opts.media;
    this.#log = opts.logger.child({ module: 'StreamLifecycle' });
    this.#clock = opts.clock ?? REAL_CLOCK;
    this.#timeoutMs = opts.timeoutMs ?? LIFECYCLE_DEFAULTS.timeoutMs;
    this.#sweepIntervalMs = opts.sweepIntervalMs ?? LIFECYCLE_DEFAULTS.sweepIntervalMs;
    this.#allowances = opts.allowances ?? STREAMING_ALLOWANCE_SECONDS;
    // A read slower than this was held through an outage (ioredis's offline queue).
    this.#outage = new OutageClock({ slowMs: 2_000, now: () => this.#clock.now() });
  }

  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /** Subscribes to node events and starts the periodic sweep. */
  async start(): Promise<void> {
    if (this.#unsubscribe || this.#closing) return;
    this.#unsubscribe = await this.#media.subscribe((e) => this.#enqueue(e));
    this.#timer = this.#clock.setInterval(() => {
      this.sweep().catch((err: unknown) => this.#log.error({ err }, 'sweep() | failed'));
    }, this.#sweepIntervalMs);
  }

  #enqueue(event: NodeEvent): void {
    // Where a timed change landed is the control channel's business (StreamControl), not the record's.
    if (event.type === 'landed') return;
    const prev = this.#chains.get(event.streamId) ?? Promise.resolve();
    const next = prev
      .then(() => this.handle(event))
      .catch((err: unknown) => this.#log.error({ err }, `handle() | failed [event:${event.type}] [streamId:${event.streamId}]`))
      .finally(() => {
        if (this.#chains.get(event.streamId) === next) this.#chains.delete(event.streamId);
      });
    this.#chains.set(event.streamId, next);
  }

  /** Resolves when every node event received so far has been handled (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.#chains.size > 0) await Promise.all([...this.#chains.values()]);
  }

  /** Applies one node event to the stream's record. */
  async handle(event: NodeEvent): Promise<void> {
    const stream = await this.#store.streams.get(event.streamId);
    if (!stream) return;
    if (stream.deleted) {
      // A node kept a deleted stream alive (a DELETE raced its ingest): stop it, emit nothing.
      if (event.type !== 'ended') await this.#media.endStream(event.nodeId, stream.id);
      return;
    }
    const now = this.#clock.now();
    const nowIso = new Date(now).toISOString();
    switch (event.type) {
      case 'started': {
        const startedAt = new Date(event.startedAt).toISOString();
        if (stream.state === 'started') {
          // A reconnect inside the window: the session goes on.
          await this.#store.streams.update(stream.id, { lastLiveAt: startedAt, nodeId: event.nodeId, updatedAt: nowIso }, { fromStates: ['started'] });
          return;
        }
        const after: StreamRecord = { ...stream, state: 'started', startedAt, lastLiveAt: startedAt, endedAt: null, endReason: null, nodeId: event.nodeId, updatedAt: nowIso };
        const eventSeq = (stream.eventSeq ?? 0) + 1;
        const startedEvent = streamStartedEvent(after, { nowMs: now, sequence: eventSeq });
        const started = await this.#store.streams.update(
          stream.id,
          { state: 'started', startedAt, lastLiveAt: startedAt, endedAt: null, endReason: null, nodeId: event.nodeId, updatedAt: nowIso, eventSeq, startedEventId: startedEvent.id },
          { fromStates: ['created', 'ended'], effects: { jobs: [webhookEventJob(startedEvent, stream.accountId)] } },
        );
        if (started) this.#log.info(`handle() | started [streamId:${stream.id}] [node:${event.nodeId}]`);
        return;
      }
      case 'live':
      case 'ended': {
        const at = event.type === 'live' ? event.lastSignalAt : event.endedAt;
        const last = ms(stream.lastLiveAt);
        if (stream.state !== 'started' || (last !== null && last >= at)) return;
        await this.#store.streams.update(stream.id, { lastLiveAt: new Date(at).toISOString(), updatedAt: nowIso }, { fromStates: ['started'] });
        return;
      }
    }
  }

  /** One pass: ends silent sessions (`timeout`) and sessions over the allowance (`credits_exhausted`). */
  sweep(): Promise<void> {
    // One sweep at a time in this process; other processes are kept out by the CAS.
    this.#sweeping ??= this.#sweep().finally(() => {
      this.#sweeping = null;
    });
    return this.#sweeping;
  }

  async #sweep(): Promise<void> {
    const live = await this.#outage.read(() => this.#store.streams.listByState(['started']));
    const now = this.#clock.now();
    const stillLive: StreamRecord[] = [];
    for (const stream of live) {
      const last = ms(stream.lastLiveAt) ?? ms(stream.startedAt) ?? now;
      // No signal could arrive during an outage: count the silence from its end at the earliest.
      if (now - Math.max(last, this.#outage.since) < this.#timeoutMs) {
        stillLive.push(stream);
        continue;
      }
      // Past the window: ask the node before ending (a lost heartbeat is not a lost stream).
      const status = stream.nodeId ? await this.#media.status(stream.nodeId, stream.id).catch(() => null) : null;
      if (status?.state === 'live') {
        const refreshed = await this.#store.streams.update(stream.id, { lastLiveAt: new Date(now).toISOString() }, { fromStates: ['started'] });
        if (refreshed) stillLive.push(refreshed);
        continue;
      }
      const ended = await endSession(this.#store, stream, 'timeout', last, now);
      if (ended) this.#log.info(`sweep() | ended [streamId:${stream.id}] [reason:timeout] [silentMs:${now - last}]`);
    }
    await this.#enforceAllowances(stillLive, now);
  }

  async #enforceAllowances(live: StreamRecord[], now: number): Promise<void> {
    const byAccount = new Map<string, StreamRecord[]>();
    for (const s of live) byAccount.set(s.accountId, [...(byAccount.get(s.accountId) ?? []), s]);
    for (const [accountId, streams] of byAccount) {
      const account = await this.#store.accounts.get(accountId);
      const allowance = account ? this.#allowances[account.plan] : null;
      if (allowance === null) continue;
      const used = await streamingUsed(this.#store, accountId, streams, now);
      if (used < allowance) continue;
      for (const stream of streams) {
        // Live until now: the node is cut right after.
        const ended = await endSession(this.#store, stream, 'credits_exhausted', now, now);
        if (!ended) continue;
        this.#log.info(`sweep() | ended [streamId:${stream.id}] [reason:credits_exhausted] [usedS:${used}] [allowanceS:${allowance}]`);
        if (stream.nodeId) await this.#media.endStream(stream.nodeId, stream.id).catch(() => false);
      }
    }
  }

  /** Idempotent: stops the sweep and the subscription, then waits for work in flight. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#timer !== null) this.#clock.clearInterval(this.#timer);
      this.#timer = null;
      await this.#unsubscribe?.().catch(() => undefined);
      await this.idle();
      await this.#sweeping;
    })();
    return this.#closing;
  }
}

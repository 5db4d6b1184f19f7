/**
 * One stream's pushes to its control sockets: one status read every FEED_TIMING.statusPollMs and
 * one stats message every FEED_TIMING.statsMs for the stream, however many sockets it has, each
 * message serialised once and handed to every socket. Created by ControlSockets when a stream's
 * first socket opens, closed when its last one goes, so an idle socket costs no timer of its own.
 */
import type { Logger } from 'pino';
import type { Account } from '../store/index.ts';
import { toApiError } from './ErrorReplies.ts';
import type { ApiError } from '../errors/index.ts';
import type { StatusData, StreamControl, StreamService } from '../streams/index.ts';

export const FEED_TIMING = {
  /** How often the status is read for changes, ms (a change reaches the clients within this). */
  statusPollMs: 250,
  /** Stats push period, ms. */
  statsMs: 1000,
} as const;

/** What a feed needs of a socket's session. */
export interface FeedSubscriber {
  /** A serialised status message (always sent). */
  push(message: string): void;
  /** A serialised stats message (skipped for a client that is behind). */
  pushStats(message: string): void;
  /** The status could not be read: say why; a deleted stream ends the session. */
  fail(err: ApiError): void;
}

export interface ControlFeedOptions {
  streamId: string;
  /** The stream's owner: every socket of a stream is its owner's (the upgrade checks it). */
  account: Account;
  streams: StreamService;
  control: StreamControl;
  logger: Logger;
  now?: () => number;
}

export class ControlFeed {
  readonly #o: ControlFeedOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #subscribers = new Set<FeedSubscriber>();
  readonly #timers: NodeJS.Timeout[] = [];
  #lastStatusKey = '';
  #lastStatus: string | null = null;
  #polling = false;
  #closed = false;

  constructor(opts: ControlFeedOptions) {
    this.#o = opts;
    this.#now = opts.now ?? Date.now;
    this.#log = opts.logger.child({ module: 'ControlFeed', streamId: opts.streamId });
    this.#timers.push(setInterval(() => void this.#poll(false), FEED_TIMING.statusPollMs));
    this.#timers.push(setInterval(() => void this.#poll(true), FEED_TIMING.statsMs));
    void this.#poll(false);
  }

  get size(): number {
    return this.#subscribers.size;
  }

  /** Adds a socket; it gets the last status at once (the first read sends it to all otherwise). */
  add(s: FeedSubscriber): void {
    this.#subscribers.add(s);
    if (this.#lastStatus !== null) s.push(this.#lastStatus);
  }

  delete(s: FeedSubscriber): void {
    this.#subscribers.delete(s);
  }

  /** Status on change (state, params, restarts, errors, schedule) and stats on the stats tick. */
  async #poll(stats: boolean): Promise<void> {
    if (this.#closed || this.#polling || this.#subscribers.size === 0) return;
    this.#polling = true;
    try {
      const data = await this.#o.streams.status(this.#o.account, this.#o.streamId);
      if (this.#closed) return;
      const scheduled = this.#o.control.scheduled(this.#o.streamId);
      const full: StatusData = scheduled.length > 0 ? { ...data, scheduled_updates: scheduled } : data;
      const inf = full.inference_status;
      const key = JSON.stringify([full.state, inf.last_params_hash, inf.restart_count, inf.last_error, scheduled.map((s) => s.id)]);
      if (key !== this.#lastStatusKey) {
        this.#lastStatusKey = key;
        this.#lastStatus = JSON.stringify({ type: 'status', data: full });
        for (const s of this.#subscribers) s.push(this.#lastStatus);
      }
      if (stats) {
        const msg = JSON.stringify({
          type: 'stats',
          time: this.#now(),
          state: full.state,
          input_fps: inf.input_fps,
          output_fps: inf.output_fps,
          stage_latency_ms: full.stage_latency_ms ?? {},
          viewers: full.viewers ?? 0,
          frames_out: full.frames_out ?? 0,
          ingest_quality: full.gateway_status.ingest_metrics.stats.conn_quality,
        });
        for (const s of this.#subscribers) s.pushStats(msg);
      }
    } catch (err) {
      // The stream was deleted (404) or the store is away: every socket hears it.
      const apiErr = toApiError('streams', err);
      if (apiErr.status >= 500) this.#log.warn({ err }, 'poll() | status read failed');
      for (const s of [...this.#subscribers]) s.fail(apiErr);
    } finally {
      this.#polling = false;
    }
  }

  /** Idempotent: stops the reads (the sessions are closed by their owner). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const t of this.#timers) clearInterval(t);
    this.#subscribers.clear();
  }
}

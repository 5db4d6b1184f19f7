/**
 * Ends the sessions of media nodes that died (worker role, scale-out). A node whose registry
 * heartbeat expired is dead: each of its `started` streams ends with reason `timeout` through the
 * supervisor's own `endSession` (CAS from `started` + `stream.ended` in the same write), with
 * `ended_at` = the last moment the stream was confirmed live — its last `live` signal, or the
 * node's last beat if that beat still listed it as live. Then the node leaves the registry.
 *
 * Several workers sweep at once safely: the CAS lets one end each session. After a store outage
 * — a read that failed, or one that ioredis held in its offline queue until Redis came back —
 * the sweeper waits one TTL of prompt reads before declaring anyone dead, so nodes beat again
 * first instead of all being ended at once (OutageClock).
 */
import type { Logger } from 'pino';
import type { NodeEntry, Store, StreamRecord } from '../store/index.ts';
import { MEDIA_NODE_KIND, type MediaNodeBeat } from './BusMediaNodeClient.ts';
import { AGENT_DEFAULTS } from './MediaNodeAgent.ts';
import { OutageClock } from './OutageClock.ts';
import { endSession } from './StreamLifecycle.ts';

export interface DeadNodeSweeperOptions {
  store: Store;
  logger: Logger;
  /** ms between sweeps. Default 1000 (a dead node's streams end ≈ ttl + 1 s after its last beat). */
  intervalMs?: number;
  /** The nodes' heartbeat TTL, ms: how long reads must have been healthy before deaths count. Default the agent's. */
  ttlMs?: number;
  /** A registry read slower than this, ms, counts as an outage (Redis held it while reconnecting). Default 1000. */
  slowReadMs?: number;
  now?: () => number;
}

export class DeadNodeSweeper {
  readonly #store: Store;
  readonly #log: Logger;
  readonly #intervalMs: number;
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #outage: OutageClock;
  #timer: NodeJS.Timeout | null = null;
  #sweeping: Promise<string[]> | null = null;
  #closing: Promise<void> | null = null;

  constructor(opts: DeadNodeSweeperOptions) {
    this.#store = opts.store;
    this.#log = opts.logger.child({ module: 'DeadNodeSweeper' });
    this.#intervalMs = opts.intervalMs ?? 1_000;
    this.#ttlMs = opts.ttlMs ?? AGENT_DEFAULTS.ttlMs;
    this.#now = opts.now ?? Date.now;
    this.#outage = new OutageClock({ slowMs: opts.slowReadMs ?? 1_000, now: this.#now });
  }

  start(): void {
    if (this.#timer || this.#closing) return;
    this.#outage.restart();
    this.#timer = setInterval(() => {
      this.sweep().catch((err: unknown) => this.#log.warn({ err }, 'sweep() | failed'));
    }, this.#intervalMs);
    this.#timer.unref();
  }

  /** One pass; resolves with the ids of the nodes it found dead. One pass at a time. */
  sweep(): Promise<string[]> {
    this.#sweeping ??= this.#sweep().finally(() => {
      this.#sweeping = null;
    });
    return this.#sweeping;
  }

  async #sweep(): Promise<string[]> {
    const entries: NodeEntry[] = await this.#outage.read(() => this.#store.nodes.list(MEDIA_NODE_KIND));
    const now = this.#now();
    // Right after an outage every beat looks old: give the nodes one TTL to beat again.
    if (this.#outage.healthyFor() < this.#ttlMs) return [];
    const dead = entries.filter((e) => e.expiresAtMs <= now);
    if (dead.length === 0) return [];
    const started = await this.#store.streams.listByState(['started']);
    for (const node of dead) {
      const streams = started.filter((s) => s.nodeId === node.id);
      for (const stream of streams) await this.#end(stream, node, now);
      // Gone only if it did not come back meanwhile (a later beat re-registers it anyway).
      const again = (await this.#store.nodes.list(MEDIA_NODE_KIND)).find((e) => e.id === node.id);
      if (again && again.expiresAtMs <= this.#now()) await this.#store.nodes.remove(MEDIA_NODE_KIND, node.id);
      this.#log.warn(`sweep() | media node dead [node:${node.id}] [lastBeat:${new Date(node.lastBeatMs).toISOString()}] [streams:${streams.length}]`);
    }
    return dead.map((n) => n.id);
  }

  async #end(stream: StreamRecord, node: NodeEntry, now: number): Promise<void> {
    const beat = node.info as Partial<MediaNodeBeat> | null;
    const lastSignal = Date.parse(stream.lastLiveAt ?? stream.startedAt ?? stream.createdAt);
    const listedAtLastBeat = beat?.live?.includes(stream.id) === true;
    const lastLive = listedAtLastBeat ? Math.max(lastSignal, node.lastBeatMs) : lastSignal;
    const ended = await endSession(this.#store, stream, 'timeout', lastLive, now);
    if (ended) this.#log.info(`sweep() | ended [streamId:${stream.id}] [reason:timeout] [node:${node.id}] [endedAt:${ended.endedAt}]`);
  }

  /** Idempotent: stops the timer and waits for a pass in flight. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#timer) clearInterval(this.#timer);
      this.#timer = null;
      await this.#sweeping?.catch(() => undefined);
    })();
    return this.#closing;
  }
}

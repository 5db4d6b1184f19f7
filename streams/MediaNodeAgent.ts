/**
 * The media node's side of the bus (the `media` role in scale-out): registers this process's
 * MediaNode in the store's node registry with heartbeats (host, capacity, models, load, the
 * streams live right now), answers parameter/status/end requests from any BusMediaNodeClient by
 * calling the node through the same InProcessMediaNodeClient the embedded default uses (so PATCH
 * keeps one hot/reload behaviour everywhere), and publishes the node's events to `media.events`.
 *
 * A beat that fails (Redis restarting) is retried on the next tick; the registry entry simply
 * ages meanwhile. On close the node leaves the registry, so its streams are not kept waiting for
 * the heartbeat to expire.
 */
import type { Logger } from 'pino';
import type { Store, Unsubscribe } from '../store/index.ts';
import { MEDIA_EVENTS_CHANNEL, MEDIA_NODE_KIND, rpcChannel, type MediaNodeBeat, type RpcReply, type RpcRequest } from './BusMediaNodeClient.ts';
import type { InProcessMediaNodeClient } from './InProcessMediaNodeClient.ts';
import type { NodeEvent, ParamsUpdate } from './MediaNodeClient.ts';
import type { StreamParams, UpdatePlan } from '../native/params/index.ts';

export const AGENT_DEFAULTS = {
  /** ms between registry beats. */
  heartbeatMs: 1_000,
  /**
   * ms a beat keeps the node alive. 4 beats: a GC pause or one slow Redis round trip does not
   * kill a node, and a dead node's streams end ≈5 s after its last beat.
   */
  ttlMs: 4_000,
} as const;

export interface MediaNodeAgentOptions {
  store: Store;
  /** The node in this process, with its id (`local.nodeId`) as registered. */
  local: InProcessMediaNodeClient;
  logger: Logger;
  heartbeatMs?: number;
  ttlMs?: number;
}

/**
 * An api older than ParamsChange (decision 0029) sent the full params and their plan side by side;
 * during a rolling upgrade the node still takes its updates, as the change they describe.
 */
function fromOlderApi(u: ParamsUpdate): ParamsUpdate {
  if (u.change) return u;
  const old = u as unknown as { params: StreamParams; mode: UpdatePlan['mode']; hot: UpdatePlan['hot']; reload: UpdatePlan['reload'] };
  return { ...u, change: { target: old.params, plan: { mode: old.mode, hot: old.hot, reload: old.reload } } };
}

export class MediaNodeAgent {
  readonly nodeId: string;
  readonly #store: Store;
  readonly #local: InProcessMediaNodeClient;
  readonly #log: Logger;
  readonly #heartbeatMs: number;
  readonly #ttlMs: number;
  /** Streams whose output is flowing (started and not ended), for the beat. */
  readonly #live = new Set<string>();
  readonly #offs: Unsubscribe[] = [];
  #timer: NodeJS.Timeout | null = null;
  #beating: Promise<void> | null = null;
  #closing: Promise<void> | null = null;

  constructor(opts: MediaNodeAgentOptions) {
    this.#store = opts.store;
    this.#local = opts.local;
    this.nodeId = opts.local.nodeId;
    this.#log = opts.logger.child({ module: 'MediaNodeAgent', nodeId: this.nodeId });
    this.#heartbeatMs = opts.heartbeatMs ?? AGENT_DEFAULTS.heartbeatMs;
    this.#ttlMs = opts.ttlMs ?? AGENT_DEFAULTS.ttlMs;
  }

  /** Answers requests and forwards events first, then registers: once listed, the node can be reached. */
  async start(): Promise<void> {
    if (this.#timer || this.#closing) return;
    this.#offs.push(await this.#store.bus.subscribe(rpcChannel(this.nodeId), (m) => void this.#answer(m as RpcRequest)));
    this.#offs.push(await this.#local.subscribe((e) => this.#forward(e)));
    await this.beat();
    this.#timer = setInterval(() => {
      this.beat().catch((err: unknown) => this.#log.warn({ err }, 'beat() | failed; retrying on the next tick'));
    }, this.#heartbeatMs);
    this.#timer.unref();
    this.#log.info(`start() | registered [node:${this.nodeId}] [heartbeatMs:${this.#heartbeatMs}] [ttlMs:${this.#ttlMs}]`);
  }

  /** One registry beat (the timer calls it; tests may too). One at a time. */
  beat(): Promise<void> {
    this.#beating ??= (async () => {
      try {
        const [node] = await this.#local.nodes();
        if (!node) return; // closed
        const info: MediaNodeBeat = { ...node, live: [...this.#live] };
        await this.#store.nodes.beat(MEDIA_NODE_KIND, this.nodeId, info, this.#ttlMs);
      } finally {
        this.#beating = null;
      }
    })();
    return this.#beating;
  }

  #forward(event: NodeEvent): void {
    if (event.type === 'started') this.#live.add(event.streamId);
    if (event.type === 'ended') this.#live.delete(event.streamId);
    this.#store.bus.publish(MEDIA_EVENTS_CHANNEL, event).catch((err: unknown) => {
      // Not durable by design: the supervisor's sweep covers a lost `live`/`ended`.
      this.#log.warn({ err }, `forward() | event lost [event:${event.type}] [streamId:${event.streamId}]`);
    });
  }

  async #answer(req: RpcRequest): Promise<void> {
    if (typeof req?.id !== 'string' || typeof req.replyTo !== 'string') return;
    let reply: RpcReply;
    try {
      let result: unknown;
      switch (req.method) {
        case 'updateParams':
          result = await this.#local.updateParams(this.nodeId, fromOlderApi(req.update));
          break;
        case 'status':
          result = await this.#local.status(this.nodeId, req.streamId);
          break;
        case 'endStream':
          result = await this.#local.endStream(this.nodeId, req.streamId);
          break;
        case 'cancelScheduled':
          result = await this.#local.cancelScheduled(this.nodeId, req.streamId, req.updateId);
          break;
        case 'setRtmpDestinations':
          result = await this.#local.setRtmpDestinations(this.nodeId, req.streamId, req.dests);
          break;
        case 'setRecording':
          result = await this.#local.setRecording(this.nodeId, req.streamId, req.on);
          break;
        case 'setSoundtrack':
          result = await this.#local.setSoundtrack(this.nodeId, req.streamId, req.soundtrack);
          break;
        case 'clip':
          result = await this.#local.clip(this.nodeId, req.streamId, { seconds: req.seconds, key: req.key });
          break;
        default:
          throw new Error(`unknown method ${JSON.stringify((req as { method?: unknown }).method)}`);
      }
      reply = { id: req.id, ok: true, result: result ?? null };
    } catch (err) {
      this.#log.warn({ err }, `answer() | request failed [method:${String(req.method)}]`);
      reply = { id: req.id, ok: false, error: (err as Error).message };
    }
    await this.#store.bus.publish(req.replyTo, reply).catch((err: unknown) => this.#log.warn({ err }, `answer() | reply lost [method:${req.method}]`));
  }

  /** Idempotent: stops beating and answering, and leaves the registry. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#timer) clearInterval(this.#timer);
      this.#timer = null;
      for (const off of this.#offs.splice(0)) await off().catch(() => undefined);
      await this.#beating?.catch(() => undefined);
      await this.#store.nodes.remove(MEDIA_NODE_KIND, this.nodeId).catch((err: unknown) => this.#log.warn({ err }, 'close() | could not leave the registry'));
    })();
    return this.#closing;
  }
}

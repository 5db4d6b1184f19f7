/**
 * MediaNodeClient over the store's bus and node registry: how the control plane reaches media
 * nodes in other processes (scale-out over Redis; design.md "One codebase, three roles"). The
 * other end is a MediaNodeAgent in each media process.
 *
 *   nodes()          ← registry kind `media`: entries whose heartbeat has not expired;
 *   updateParams()   → request on `media.rpc.<nodeId>` (the parameter channel), reply on
 *   status()           `media.reply.<clientId>` matched by a correlation id; no reply within
 *   endStream()        `requestTimeoutMs` = the node is unreachable;
 *   subscribe()      ← `media.events` (started / live / ended from every node).
 *
 * A call to a node the registry does not hold as alive answers at once (no request): a dead
 * node's streams are not there. Bus messages are not durable: a request lost with a Redis restart
 * times out, and the caller sees the same answer as for a dead node.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { RtmpDestination, SoundtrackSpec } from '../media/index.ts';
import type { NodeEntry, Store, Unsubscribe } from '../store/index.ts';
import type { ClipRequest, ClipResult, MediaNodeClient, MediaNodeInfo, NodeEvent, NodeStreamStatus, ParamsUpdate, UpdateResult } from './MediaNodeClient.ts';

/** Registry kind media nodes beat under. */
export const MEDIA_NODE_KIND = 'media';
/** Channel every node publishes its events on. */
export const MEDIA_EVENTS_CHANNEL = 'media.events';
export const rpcChannel = (nodeId: string): string => `media.rpc.${nodeId}`;
export const replyChannel = (clientId: string): string => `media.reply.${clientId}`;

/** What a node tells the registry about itself on every beat. */
export interface MediaNodeBeat extends MediaNodeInfo {
  /** Streams with output flowing at this beat: a dead node's streams were confirmed live until its last beat. */
  live: string[];
}

export type RpcRequest =
  | { id: string; replyTo: string; method: 'updateParams'; update: ParamsUpdate }
  | { id: string; replyTo: string; method: 'status'; streamId: string }
  | { id: string; replyTo: string; method: 'endStream'; streamId: string }
  | { id: string; replyTo: string; method: 'clip'; streamId: string; seconds: number; key: string }
  | { id: string; replyTo: string; method: 'setRtmpDestinations'; streamId: string; dests: RtmpDestination[] }
  | { id: string; replyTo: string; method: 'setRecording'; streamId: string; on: boolean }
  | { id: string; replyTo: string; method: 'setSoundtrack'; streamId: string; soundtrack: SoundtrackSpec | null }
  | { id: string; replyTo: string; method: 'cancelScheduled'; streamId: string; updateId: string };

/** ms a clip request waits for the node (it remuxes and writes the MP4 first). */
const CLIP_TIMEOUT_MS = 15_000;

export type RpcReply = { id: string; ok: true; result: unknown } | { id: string; ok: false; error: string };

/** The node did not answer in time (dead, partitioned, or the message was lost). */
export class MediaNodeUnreachableError extends Error {
  constructor(
    readonly nodeId: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'MediaNodeUnreachableError';
  }
}

export interface BusMediaNodeClientOptions {
  store: Store;
  logger: Logger;
  /** ms a request waits for the node's reply. Default 3000 (a PATCH stays well inside any HTTP timeout). */
  requestTimeoutMs?: number;
  /** Clock for the registry's expiry times; must be comparable with the store's. Default Date.now. */
  now?: () => number;
}

interface Pending {
  nodeId: string;
  resolve(value: unknown): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

export class BusMediaNodeClient implements MediaNodeClient {
  readonly clientId = randomBytes(8).toString('hex');
  readonly #store: Store;
  readonly #log: Logger;
  readonly #timeoutMs: number;
  readonly #now: () => number;
  readonly #pending = new Map<string, Pending>();
  #replies: Promise<Unsubscribe> | null = null;
  #seq = 0;
  #closing: Promise<void> | null = null;

  constructor(opts: BusMediaNodeClientOptions) {
    this.#store = opts.store;
    this.#log = opts.logger.child({ module: 'BusMediaNodeClient' });
    this.#timeoutMs = opts.requestTimeoutMs ?? 3000;
    this.#now = opts.now ?? Date.now;
  }

  /** Alive registry entries (heartbeat not expired on our clock). */
  async #alive(): Promise<NodeEntry[]> {
    const now = this.#now();
    return (await this.#store.nodes.list(MEDIA_NODE_KIND)).filter((e) => e.expiresAtMs > now);
  }

  async nodes(): Promise<MediaNodeInfo[]> {
    const alive = await this.#alive();
    if (alive.length < 2) return alive.map((e) => info(e));
    // Placement keeps the least loaded node and, among equals, the first: rotate by a counter
    // shared by every api replica so ties (nodes that have not reported their new streams yet)
    // are broken round-robin across the whole deployment, not per replica.
    const turn = await this.#store.counters.add('media.placement.turn', 1);
    const k = turn % alive.length;
    return [...alive.slice(k), ...alive.slice(0, k)].map((e) => info(e));
  }

  async #isAlive(nodeId: string): Promise<boolean> {
    return (await this.#alive()).some((e) => e.id === nodeId);
  }

  async updateParams(nodeId: string, update: ParamsUpdate): Promise<UpdateResult> {
    if (!(await this.#isAlive(nodeId))) return { delivered: false };
    try {
      return (await this.#request(nodeId, { method: 'updateParams', update })) as UpdateResult;
    } catch (err) {
      if (!(err instanceof MediaNodeUnreachableError)) throw err;
      this.#log.warn({ err }, `updateParams() | node did not answer [node:${nodeId}] [streamId:${update.streamId}]`);
      // Stored already: the params apply at the stream's next ingest, wherever it lands.
      return { delivered: false, error: err.message };
    }
  }

  async status(nodeId: string, streamId: string): Promise<NodeStreamStatus | null> {
    if (!(await this.#isAlive(nodeId))) return null;
    return (await this.#request(nodeId, { method: 'status', streamId })) as NodeStreamStatus | null;
  }

  async endStream(nodeId: string, streamId: string): Promise<boolean> {
    if (!(await this.#isAlive(nodeId))) return false;
    return (await this.#request(nodeId, { method: 'endStream', streamId })) as boolean;
  }

  async cancelScheduled(nodeId: string, streamId: string, id: string): Promise<boolean> {
    if (!(await this.#isAlive(nodeId))) return false;
    return (await this.#request(nodeId, { method: 'cancelScheduled', streamId, updateId: id })) as boolean;
  }

  async setRtmpDestinations(nodeId: string, streamId: string, dests: RtmpDestination[]): Promise<boolean> {
    if (!(await this.#isAlive(nodeId))) return false;
    return (await this.#request(nodeId, { method: 'setRtmpDestinations', streamId, dests })) as boolean;
  }

  async setRecording(nodeId: string, streamId: string, on: boolean): Promise<boolean> {
    if (!(await this.#isAlive(nodeId))) return false;
    return (await this.#request(nodeId, { method: 'setRecording', streamId, on })) as boolean;
  }

  async setSoundtrack(nodeId: string, streamId: string, soundtrack: SoundtrackSpec | null): Promise<boolean> {
    if (!(await this.#isAlive(nodeId))) return false;
    return (await this.#request(nodeId, { method: 'setSoundtrack', streamId, soundtrack })) as boolean;
  }

  async clip(nodeId: string, streamId: string, req: ClipRequest): Promise<ClipResult | null> {
    if (!(await this.#isAlive(nodeId))) return null;
    // The node remuxes and writes the file before answering: allow for it (≈ 0.1–1 s).
    return (await this.#request(nodeId, { method: 'clip', streamId, ...req }, CLIP_TIMEOUT_MS)) as ClipResult | null;
  }

  async subscribe(handler: (event: NodeEvent) => void): Promise<Unsubscribe> {
    return this.#store.bus.subscribe(MEDIA_EVENTS_CHANNEL, (message) => handler(message as NodeEvent));
  }

  /** Subscribes to our reply channel once (before the first request is sent, so no reply is missed). */
  #listen(): Promise<Unsubscribe> {
    this.#replies ??= this.#store.bus.subscribe(replyChannel(this.clientId), (message) => {
      const reply = message as RpcReply;
      const pending = this.#pending.get(reply.id);
      if (!pending) return; // late reply after a timeout
      this.#pending.delete(reply.id);
      clearTimeout(pending.timer);
      if (reply.ok) pending.resolve(reply.result);
      else pending.reject(new Error(`media node ${pending.nodeId}: ${reply.error}`));
    });
    this.#replies.catch(() => {
      this.#replies = null;
    });
    return this.#replies;
  }

  async #request(nodeId: string, body: DistributiveOmit<RpcRequest, 'id' | 'replyTo'>, timeoutMs = this.#timeoutMs): Promise<unknown> {
    if (this.#closing) throw new MediaNodeUnreachableError(nodeId, 'media node client is closed');
    await this.#listen();
    const id = `${this.clientId}.${++this.#seq}`;
    const request = { ...body, id, replyTo: replyChannel(this.clientId) } as RpcRequest;
    const answer = new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new MediaNodeUnreachableError(nodeId, `media node ${nodeId} did not answer ${body.method} in ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(id, { nodeId, resolve, reject, timer });
    });
    try {
      await this.#store.bus.publish(rpcChannel(nodeId), request);
    } catch (cause) {
      const pending = this.#pending.get(id);
      if (pending) {
        clearTimeout(pending.timer);
        this.#pending.delete(id);
      }
      throw new MediaNodeUnreachableError(nodeId, `cannot send ${body.method} to media node ${nodeId}`, { cause });
    }
    return answer;
  }

  /** Idempotent: fails requests in flight and leaves the reply channel. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      for (const [id, p] of this.#pending) {
        clearTimeout(p.timer);
        p.reject(new MediaNodeUnreachableError(p.nodeId, 'media node client closed'));
        this.#pending.delete(id);
      }
      const off = await this.#replies?.catch(() => null);
      await off?.().catch(() => undefined);
    })();
    return this.#closing;
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

function info(e: NodeEntry): MediaNodeInfo {
  const b = e.info as Partial<MediaNodeBeat> | null;
  return {
    id: e.id,
    publicUrl: b?.publicUrl ?? '',
    models: b?.models ?? [],
    demo: b?.demo ?? false,
    capacity: b?.capacity ?? 0,
    load: b?.load ?? 0,
    viewers: b?.viewers ?? 0,
    viewerCapacity: b?.viewerCapacity ?? 0,
    audience: b?.audience ?? {},
    countedAt: b?.countedAt ?? 0,
  };
}

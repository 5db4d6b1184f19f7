/**
 * WHIP/WHEP/HLS requests that reach a process which is not the stream's node (scale-out): the
 * stream's record names its node (placement), the registry gives that node's public URL, and the
 * request goes there.
 *
 * - WHIP and WHEP POSTs are forwarded by default (`proxy`): the node's answer comes back as is,
 *   with its absolute session `Location`, so the client's PATCH/DELETE then reach the node
 *   directly. `redirect` answers 307 instead (RFC 9725 §4.5 allows it for load balancing; OBS
 *   follows it), but browsers and fetch clients drop `Authorization` on a cross-origin redirect,
 *   so it suits only clients that re-send it — hence not the default.
 * - HLS GETs are 307-redirected (players follow; the playlist's relative URIs then resolve on
 *   the node).
 * - WHEP viewers of one stream go to its node (the origin) until it carries `cascadeOriginViewers`
 *   of them (or is full); later ones go to other live media nodes with room, which relay the stream
 *   (edges, decision 0030): an edge already relaying it first (one pull per edge), the least
 *   loaded among them. An edge relays the origin's H.264 as is, so an offer without H.264 stays on
 *   the origin. Counts come from the nodes' registry beats (every second) plus what this replica
 *   placed since, so a burst of viewers does not all land where the last beat saw room.
 * - A stream whose node is dead is placed again on a live node that has its model and room (the
 *   publisher is reconnecting, the same stream goes on elsewhere); a WHEP or HLS request for it
 *   answers 503 until a publisher is back.
 *
 * In a process that also runs a media node the local routes stay in place and a hook in front of
 * them forwards only what another live node owns; an api-only process gets its own thin routes.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { Store, StreamRecord } from '../store/index.ts';
import { FORWARDED_HEADER, PUBLIC_ROUTE, WHIP_POST, WHIP_WHEP_CORS, forwardedFor } from '../media/index.ts';
import type { MediaNodeClient, MediaNodeInfo } from '../streams/index.ts';

export type LiveRouting = 'proxy' | 'redirect';

export interface LiveRouterOptions {
  store: Store;
  media: MediaNodeClient;
  logger: Logger;
  /** The media node in this process, if any: requests it owns are served by `routes`. */
  local?: { nodeId: string; routes: (app: FastifyInstance) => void };
  /** How WHIP/WHEP POSTs reach a remote node. Default `proxy`. */
  routing?: LiveRouting;
  /** ms a forwarded POST may take (the node gathers candidates before answering). Default 20 000. */
  proxyTimeoutMs?: number;
  /** Signs the client's address on forwarded POSTs, so the node's per-client limits see the client, not us. */
  forwardedSecret?: string;
  /** Connected viewers of one stream its origin carries before new ones go to edges (CASCADE_ORIGIN_VIEWERS). Default 250. */
  cascadeOriginViewers?: number;
}

/** ms a placement this replica made may count on top of a node's counts (taken before it); beats come every second. */
const PLACED_COUNT_MS = 3_000;
/**
 * ms before a node's counts were taken that a placement still counts on top of them: the forwarded
 * request reaches the node and makes its session a moment after we decide (and clocks of two
 * hosts differ a little). Counting one twice only spills a viewer to an edge early.
 */
const PLACED_MARGIN_MS = 500;
/** Placements remembered at most (a burst beyond this many in PLACED_COUNT_MS counts as this many). */
const PLACED_MAX = 10_000;

const SDP = 'application/sdp';
/** Headers of the node's answer a forwarded reply keeps. */
const PASS_HEADERS = ['content-type', 'location', 'etag', 'link', 'accept-patch', 'www-authenticate', 'retry-after'];

/** Marks a request an api replica forwarded to a node (and, signed, the client it came from). */
const FORWARDED = FORWARDED_HEADER;

type Route = 'whip' | 'whep' | 'hls';
type Target = { to: 'local' } | { to: 'remote'; node: MediaNodeInfo } | { to: 'none'; status: number; message: string };

/** The Bearer token of a request, if any. */
function bearerOf(req: FastifyRequest): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  return m?.[1];
}

/** Constant-time comparison of a token with the stream key. */
function sameSecret(given: string | undefined, expected: string): boolean {
  if (given === undefined) return false;
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

function text(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).headers(WHIP_WHEP_CORS).type('text/plain; charset=utf-8').send(`${message}\n`);
}

export class LiveRouter {
  readonly #o: LiveRouterOptions;
  readonly #log: Logger;
  readonly #routing: LiveRouting;
  /** WHEP viewers this replica placed in the last PLACED_COUNT_MS, oldest first (`at`: ms epoch, as the nodes' `countedAt`). */
  readonly #placed: { nodeId: string; streamId: string; at: number }[] = [];

  constructor(opts: LiveRouterOptions) {
    this.#o = opts;
    this.#log = opts.logger.child({ module: 'LiveRouter' });
    this.#routing = opts.routing ?? 'proxy';
  }

  /** The fastify plugin: the local node's routes behind a forwarding hook, or stand-alone forwarding routes. */
  plugin(): FastifyPluginAsync {
    return async (app) => {
      const local = this.#o.local;
      if (local) {
        app.addHook('preHandler', async (req, reply) => {
          const route = routeOf(req);
          // Forwarded once already: serve here whatever the registry says now (no ping-pong).
          if (!route || req.headers[FORWARDED] !== undefined) return;
          const param = (req.params as Record<string, string>)[route === 'whip' ? 'streamId' : 'playbackId'] ?? '';
          const target = await this.target(route, param, bearerOf(req), typeof req.body === 'string' ? req.body : '');
          if (target.to === 'remote') return this.#send(route, target.node, req, reply);
          // Local or nobody: the node's own route answers (it refuses what it cannot serve).
        });
        local.routes(app);
        return;
      }
      app.addContentTypeParser(SDP, { parseAs: 'string', bodyLimit: 64 * 1024 }, (_req, body, done) => done(null, body));
      const options = async (_req: FastifyRequest, reply: FastifyReply) => reply.code(204).headers({ ...WHIP_WHEP_CORS, 'accept-post': SDP }).send();
      app.options('/live/:streamId/whip', PUBLIC_ROUTE, options);
      app.options('/live/:playbackId/whep', PUBLIC_ROUTE, options);
      const handler = (route: Route, param: string) => async (req: FastifyRequest, reply: FastifyReply) => {
        const target = await this.target(route, (req.params as Record<string, string>)[param] ?? '', bearerOf(req), typeof req.body === 'string' ? req.body : '');
        if (target.to === 'none') return text(reply, target.status, target.message);
        if (target.to === 'local') return text(reply, 503, 'no media node in this process');
        return this.#send(route, target.node, req, reply);
      };
      app.post('/live/:streamId/whip', WHIP_POST, handler('whip', 'streamId'));
      app.post('/live/:playbackId/whep', PUBLIC_ROUTE, handler('whep', 'playbackId'));
      app.get('/hls/:playbackId/*', PUBLIC_ROUTE, handler('hls', 'playbackId'));
      // Session URLs are absolute on the node; one reaching us was built by hand.
      app.all('/live/sessions/:sessionId', PUBLIC_ROUTE, async (_req, reply) => text(reply, 404, 'unknown session (session URLs are on the media node: use the Location you were given)'));
    };
  }

  /**
   * Where a request for the stream (WHIP: stream id; WHEP/HLS: playback id) should go. `bearer`
   * is the WHIP request's token: a stream is placed again only for its own stream key, so nobody
   * else can move a stream (and take a slot on another node) by knowing its id. `offer`: a WHEP
   * request's SDP (an edge takes only viewers that offer H.264).
   */
  async target(route: Route, param: string, bearer?: string, offer = ''): Promise<Target> {
    const stream = route === 'whip' ? await this.#o.store.streams.get(param) : await this.#o.store.streams.getByPlaybackId(param);
    // Unknown streams: the node's own answer (401 / 404) from the local node, or ours.
    if (!stream || stream.deleted) return this.#o.local ? { to: 'local' } : route === 'whip' ? { to: 'none', status: 401, message: 'invalid stream key' } : { to: 'none', status: 404, message: 'unknown playback id' };
    const nodes = await this.#o.media.nodes();
    const owner = nodes.find((n) => n.id === stream.nodeId);
    if (owner) {
      const node = route === 'whep' ? this.#placeViewer(stream.id, owner, nodes, offer) : owner;
      return node.id === this.#o.local?.nodeId ? { to: 'local' } : { to: 'remote', node };
    }
    if (route !== 'whip') return { to: 'none', status: 503, message: 'the stream is not on any live media node right now; retry when it is published' };
    if (!sameSecret(bearer, stream.streamKey)) return this.#o.local ? { to: 'local' } : { to: 'none', status: 401, message: 'invalid stream key' };
    const moved = await this.#replace(stream, nodes);
    if (!moved) return { to: 'none', status: 503, message: 'no live media node can take this stream right now; retry shortly' };
    return moved.id === this.#o.local?.nodeId ? { to: 'local' } : { to: 'remote', node: moved };
  }

  /** The node a new WHEP viewer of `streamId` goes to: its origin, or an edge (see the header). */
  #placeViewer(streamId: string, origin: MediaNodeInfo, nodes: MediaNodeInfo[], offer: string): MediaNodeInfo {
    const now = Date.now();
    while (this.#placed.length > 0 && (this.#placed.length > PLACED_MAX || (this.#placed[0] as { at: number }).at < now - PLACED_COUNT_MS)) this.#placed.shift();
    // What this replica placed there since the node's counts were taken (later ones are in them).
    const placedOn = (n: MediaNodeInfo, stream?: string) =>
      this.#placed.reduce((k, p) => k + (p.nodeId === n.id && p.at >= n.countedAt - PLACED_MARGIN_MS && (stream === undefined || p.streamId === stream) ? 1 : 0), 0);
    const viewers = (n: MediaNodeInfo) => n.viewers + placedOn(n);
    // Nodes from before the cascade report no viewer capacity: never edges.
    const room = (n: MediaNodeInfo) => n.viewerCapacity > 0 && viewers(n) < n.viewerCapacity;
    const load = (n: MediaNodeInfo) => viewers(n) / n.viewerCapacity;
    const share = this.#o.cascadeOriginViewers ?? 250;
    // Sessions (connecting ones too), less the edges' pulls: the viewers the origin itself serves.
    const own = origin.audience[streamId];
    const atOrigin = (own ? own.sessions - own.edges : 0) + placedOn(origin, streamId);
    let node = origin;
    const originFull = origin.viewerCapacity > 0 && !room(origin);
    if ((atOrigin >= share || originFull) && /^a=rtpmap:\d+ H264\//im.test(offer)) {
      const edges = nodes.filter((n) => n.id !== origin.id && room(n));
      const relaying = edges.filter((n) => n.audience[streamId]?.role === 'edge' || placedOn(n, streamId) > 0);
      const best = (relaying.length > 0 ? relaying : edges).sort((a, b) => load(a) - load(b))[0];
      if (best) node = best;
    }
    this.#placed.push({ nodeId: node.id, streamId, at: now });
    return node;
  }

  /** Places a stream whose node is gone on a live node with its model and room; the record follows. */
  async #replace(stream: StreamRecord, nodes: MediaNodeInfo[]): Promise<MediaNodeInfo | null> {
    const model = (stream.params as { model_id?: string }).model_id;
    const node = nodes
      .filter((n) => (model === undefined || n.models.includes(model)) && n.load < n.capacity)
      .sort((a, b) => a.load / a.capacity - b.load / b.capacity)[0];
    if (!node) return null;
    await this.#o.store.streams.update(stream.id, { nodeId: node.id, updatedAt: new Date().toISOString() });
    this.#log.info(`replace() | stream moved to a live node [streamId:${stream.id}] [from:${stream.nodeId ?? '-'}] [to:${node.id}]`);
    return node;
  }

  async #send(route: Route, node: MediaNodeInfo, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const url = `${node.publicUrl.replace(/\/+$/, '')}${req.url}`;
    if (route === 'hls' || this.#routing === 'redirect') return reply.code(307).headers({ ...WHIP_WHEP_CORS, location: url, 'cache-control': 'no-store' }).send();
    const headers: Record<string, string> = {
      'content-type': req.headers['content-type'] ?? SDP,
      [FORWARDED]: this.#o.forwardedSecret ? forwardedFor(req.ip, this.#o.forwardedSecret) : '1',
    };
    if (req.headers.authorization) headers['authorization'] = req.headers.authorization;
    let res: Response;
    try {
      res = await fetch(url, { method: 'POST', headers, body: typeof req.body === 'string' ? req.body : '', redirect: 'manual', signal: AbortSignal.timeout(this.#o.proxyTimeoutMs ?? 20_000) });
    } catch (err) {
      this.#log.warn({ err }, `send() | node unreachable [node:${node.id}] [url:${url}]`);
      return text(reply, 502, `media node ${node.id} did not answer`);
    }
    const body = await res.text();
    reply.code(res.status).headers(WHIP_WHEP_CORS);
    for (const name of PASS_HEADERS) {
      const value = res.headers.get(name);
      if (value !== null) reply.header(name, value);
    }
    return reply.send(body);
  }
}

/** Which forwarded route a request is, by its route pattern (null for everything else). */
function routeOf(req: FastifyRequest): Route | null {
  const url = req.routeOptions.url;
  if (req.method === 'POST' && url === '/live/:streamId/whip') return 'whip';
  if (req.method === 'POST' && url === '/live/:playbackId/whep') return 'whep';
  if (req.method === 'GET' && url?.startsWith('/hls/:playbackId/')) return 'hls';
  return null;
}

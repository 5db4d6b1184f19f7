/**
 * HLS endpoints of the media node (an encapsulated fastify plugin, public like WHEP: the playback
 * id is the unguessable capability).
 *
 *   GET /hls/:playbackId/master.m3u8                             multivariant playlist: the full encode and each rendition
 *   GET /hls/:playbackId/index.m3u8[?_HLS_msn=M[&_HLS_part=P]]  LL-HLS playlist (full size); blocking reload
 *   GET /hls/:playbackId/plain.m3u8                              whole segments only (non-LL players)
 *   GET /hls/:playbackId/init{N}.mp4 | seg{M}.m4s | part{M}.{P}.m4s
 *   GET /hls/:playbackId/{rendition}/…                           the same files of a rendition (settings `renditions`)
 *
 * Blocking reload (rfc8216bis §6.2.5.2): the request is held until segment M (part P) exists, for
 * at most 3 × target duration (then 503); M more than two beyond the newest segment → 400. The part
 * named by EXT-X-PRELOAD-HINT is held the same way. Before the stream's first keyframe a playlist
 * request waits up to `firstMediaWaitMs`, then 404 (players retry).
 *
 * Caching (for a shared cache or CDN in front, docs/operations.md "LL-HLS behind a cache"): every
 * answer but an admission refusal is `public` with a max-age, so that a cache stores it and
 * collapses concurrent misses into one origin request. Playlists, blocking or not, live 1 s in
 * a shared cache and not at all in a player's (Cache-Control counts whole seconds; the cache key holds the query, so each `_HLS_msn`/`_HLS_part`
 * answer is its own entry, and one that names the part asked for stays right while its parts are
 * served: ≥ 3 segments); media files never change once published and live MEDIA_MAX_AGE_S. Errors
 * a player retries (not live yet, a part that never came) live 1 s too: uncacheable answers
 * behind a collapsing cache are fetched one waiter after another. No `Vary`: the answers depend
 * on nothing but the URL (CORS is `*`).
 *
 * Admission: when the stream (or its account) has an admission rule for `read`, every request —
 * playlists and media files alike, since a part's name is easy to guess — is asked about first
 * (401/403 before anything is served). The rule caches its decisions per client, token and query,
 * so a player's ≈ 10 requests a second cost one hook call every few seconds. The playlist's query
 * (a `?jwt=` token, whatever a hook reads) is carried into every URI the playlist names, as
 * players do not pass it on to the files themselves; `_HLS_*` parameters are not.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HlsOutput } from './hls/HlsOutput.ts';
import type { HlsPackager } from './hls/HlsPackager.ts';
import type { MediaNode } from './MediaNode.ts';
import { clientAddress } from './NodeSignatures.ts';
import { askAdmission, refuseAdmission } from './WhipWhepRoutes.ts';

const PLAYLIST = 'application/vnd.apple.mpegurl';
const PUBLIC = { config: { public: true }, schema: { hide: true } } as Record<string, unknown>;
const CORS = { 'access-control-allow-origin': '*', 'access-control-allow-methods': 'GET, OPTIONS' };
/**
 * Cache-Control of playlists and of errors a player retries: a shared cache keeps them 1 s (the
 * shortest Cache-Control can say; RFC 9111 §5.2.2.10 s-maxage), a player's own cache not at all
 * (max-age=0), so a player that asks again, a non-blocking reload or a retry, reaches the server.
 */
export const PLAYLIST_CACHE = 'public, max-age=0, s-maxage=1';
/**
 * s a shared cache keeps a part, segment or init segment: longer than a player still asks for one
 * (plain players fetch segments up to ≈ 4 target durations behind the edge, 8 s with the defaults),
 * short enough that a stream started again under the same playback id (its numbering restarts at
 * 0) is not served the last run's files for long.
 */
export const MEDIA_MAX_AGE_S = 10;
/** Answers for one client only (admission refusals): no shared cache may keep them. */
const PRIVATE = 'private, no-store';
/** Playback id → stream id lookups are cached this long (LL-HLS players send ≈ 10 requests/s). */
const RESOLVE_TTL_MS = 5000;

export async function hlsRoutes(app: FastifyInstance, opts: { node: MediaNode; firstMediaWaitMs?: number }): Promise<void> {
  const { node } = opts;
  const cache = new Map<string, { streamId: string | null; until: number }>();

  const fail = (reply: FastifyReply, status: number, message: string) =>
    reply.code(status).headers({ ...CORS, 'cache-control': PLAYLIST_CACHE }).type('text/plain; charset=utf-8').send(`${message}\n`);

  /**
   * The stream's HLS output and the packager of `variant` (the full encode without one) when the
   * client may read it; otherwise the reply is sent and null returned.
   */
  const output = async (
    req: FastifyRequest<{ Params: { playbackId: string; variant?: string } }>,
    reply: FastifyReply,
  ): Promise<{ out: HlsOutput; hls: HlsPackager } | null> => {
    const streamId = await streamOf(req.params.playbackId);
    const out = streamId ? node.getStream(streamId)?.readers.find(HlsOutput) : undefined;
    const variant = req.params.variant;
    const hls = variant === undefined ? out?.packager : out?.variants.get(variant);
    if (!streamId || !out || !hls || hls.closed) {
      fail(reply, 404, variant === undefined || !out ? 'no live HLS for this playback id' : `no rendition ${JSON.stringify(variant)} of this stream`);
      return null;
    }
    const verdict = await askAdmission(node, req, { action: 'read', protocol: 'hls', streamId, clientIp: clientAddress(req, node.options.forwardedSecret) });
    if (!verdict.admitted) {
      refuseAdmission(reply, verdict, { ...CORS, 'cache-control': PRIVATE });
      return null;
    }
    hls.markRequested();
    return { out, hls };
  };
  const packager = async (req: FastifyRequest<{ Params: { playbackId: string; variant?: string } }>, reply: FastifyReply): Promise<HlsPackager | null> =>
    (await output(req, reply))?.hls ?? null;

  const streamOf = async (playbackId: string): Promise<string | null> => {
    const now = Date.now();
    let hit = cache.get(playbackId);
    if (!hit || hit.until < now) {
      const r = await node.options.resolvePlayback(playbackId);
      hit = { streamId: r?.streamId ?? null, until: now + RESOLVE_TTL_MS };
      if (cache.size > 10_000) cache.clear();
      cache.set(playbackId, hit);
    }
    return hit.streamId;
  };

  app.options('/hls/*', PUBLIC, async (_req, reply) => reply.code(204).headers(CORS).send());

  type PlaylistRequest = FastifyRequest<{ Params: { playbackId: string; variant?: string }; Querystring: { _HLS_msn?: string; _HLS_part?: string } }>;
  /** The query a playlist was asked with, without `_HLS_*`: carried into every URI it names. */
  const carriedQuery = (req: FastifyRequest): string => {
    const q = req.url.indexOf('?');
    return q < 0 ? '' : req.url.slice(q + 1).split('&').filter((p) => p !== '' && !p.startsWith('_HLS_')).join('&');
  };
  const sendPlaylist = (req: FastifyRequest, reply: FastifyReply, text: string) => {
    const carried = carriedQuery(req);
    return reply.code(200).headers({ ...CORS, 'cache-control': PLAYLIST_CACHE }).type(PLAYLIST).send(carried === '' ? text : withQuery(text, carried));
  };
  const playlist = (ll: boolean) => async (req: PlaylistRequest, reply: FastifyReply) => {
      const hls = await packager(req, reply);
      if (!hls) return reply;
      const blockMs = 3 * hls.targetDuration * 1000;
      if (!hls.hasMedia && !(await hls.waitForMedia(opts.firstMediaWaitMs ?? blockMs))) return fail(reply.header('retry-after', '1'), 404, 'stream not live yet');
      const msn = req.query._HLS_msn !== undefined ? Number(req.query._HLS_msn) : undefined;
      const part = req.query._HLS_part !== undefined ? Number(req.query._HLS_part) : undefined;
      if (ll && msn !== undefined) {
        if (!Number.isInteger(msn) || msn < 0 || (part !== undefined && (!Number.isInteger(part) || part < 0))) return fail(reply, 400, 'bad _HLS_msn/_HLS_part');
        if (msn > hls.lastMsn + 2) return fail(reply, 400, `_HLS_msn ${msn} is too far ahead of ${hls.lastMsn}`);
        if (!(await hls.waitFor(msn, part, blockMs))) return fail(reply, 503, 'playlist update did not come in time');
      }
      return sendPlaylist(req, reply, hls.playlist(ll ? 'll' : 'plain'));
  };
  app.get('/hls/:playbackId/master.m3u8', PUBLIC, async (req: PlaylistRequest, reply: FastifyReply) => {
    const found = await output(req, reply);
    if (!found) return reply;
    const { out, hls } = found;
    // Every variant with a whole segment first: a player reads this playlist once, so a rendition
    // left out now is never offered to it, and a variant without a segment is an empty level to hls.js.
    const waitMs = opts.firstMediaWaitMs ?? 3 * hls.targetDuration * 1000;
    const ready = await Promise.all([hls, ...out.variants.values()].map((p) => p.waitForSegment(waitMs)));
    if (!ready[0]) return fail(reply.header('retry-after', '1'), 404, 'stream not live yet');
    return sendPlaylist(req, reply, out.multivariant());
  });
  for (const prefix of ['/hls/:playbackId', '/hls/:playbackId/:variant']) {
    app.get(`${prefix}/index.m3u8`, PUBLIC, playlist(true));
    app.get(`${prefix}/plain.m3u8`, PUBLIC, playlist(false));
    app.get(`${prefix}/:file`, PUBLIC, mediaFile);
  }

  async function mediaFile(req: FastifyRequest<{ Params: { playbackId: string; variant?: string; file: string } }>, reply: FastifyReply) {
    const hls = await packager(req, reply);
    if (!hls) return reply;
    const { file } = req.params;
    let body: Buffer | undefined;
    let m: RegExpExecArray | null;
    if ((m = /^init(\d+)\.mp4$/.exec(file))) body = hls.initSegment(Number(m[1]));
    else if ((m = /^seg(\d+)\.m4s$/.exec(file))) body = hls.segment(Number(m[1]));
    else if ((m = /^part(\d+)\.(\d+)\.m4s$/.exec(file))) body = await hls.part(Number(m[1]), Number(m[2]), 3 * hls.targetDuration * 1000);
    if (!body) return fail(reply, 404, 'no such segment (expired or not yet produced)');
    return reply.code(200).headers({ ...CORS, 'cache-control': `public, max-age=${MEDIA_MAX_AGE_S}` }).type('video/mp4').send(body);
  }
}

/** The playlist with `query` (already URL-encoded) added to every URI it names (segment lines and URI="…" attributes). */
export function withQuery(playlist: string, query: string): string {
  const add = (uri: string) => `${uri}${uri.includes('?') ? '&' : '?'}${query}`;
  return playlist
    .split('\n')
    .map((line) => (line === '' ? line : line.startsWith('#') ? line.replace(/URI="([^"]*)"/g, (_m, uri: string) => `URI="${add(uri)}"`) : add(line)))
    .join('\n');
}

/**
 * HLS endpoints of the media node (an encapsulated fastify plugin, public like WHEP: the playback
 * id is the unguessable capability).
 *
 *   GET /hls/:playbackId/index.m3u8[?_HLS_msn=M[&_HLS_part=P]]  LL-HLS playlist; blocking reload
 *   GET /hls/:playbackId/plain.m3u8                              whole segments only (non-LL players)
 *   GET /hls/:playbackId/init{N}.mp4 | seg{M}.m4s | part{M}.{P}.m4s
 *
 * Blocking reload (rfc8216bis §6.2.5.2): the request is held until segment M (part P) exists, for
 * at most 3 × target duration (then 503); M more than two beyond the newest segment → 400. The part
 * named by EXT-X-PRELOAD-HINT is held the same way. Before the stream's first keyframe a playlist
 * request waits up to `firstMediaWaitMs`, then 404 (players retry).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { HlsPackager } from './HlsPackager.ts';
import type { MediaNode } from './MediaNode.ts';

const PLAYLIST = 'application/vnd.apple.mpegurl';
const PUBLIC = { config: { public: true }, schema: { hide: true } } as Record<string, unknown>;
const CORS = { 'access-control-allow-origin': '*', 'access-control-allow-methods': 'GET, OPTIONS' };
/** Playback id → stream id lookups are cached this long (LL-HLS players send ≈ 10 requests/s). */
const RESOLVE_TTL_MS = 5000;

export async function hlsRoutes(app: FastifyInstance, opts: { node: MediaNode; firstMediaWaitMs?: number }): Promise<void> {
  const { node } = opts;
  const cache = new Map<string, { streamId: string | null; until: number }>();

  const packager = async (playbackId: string): Promise<HlsPackager | null> => {
    const now = Date.now();
    let hit = cache.get(playbackId);
    if (!hit || hit.until < now) {
      const r = await node.options.resolvePlayback(playbackId);
      hit = { streamId: r?.streamId ?? null, until: now + RESOLVE_TTL_MS };
      if (cache.size > 10_000) cache.clear();
      cache.set(playbackId, hit);
    }
    if (!hit.streamId) return null;
    const hls = node.getStream(hit.streamId)?.hls;
    if (!hls || hls.closed) return null;
    hls.markRequested();
    return hls;
  };

  const fail = (reply: FastifyReply, status: number, message: string) => reply.code(status).headers(CORS).type('text/plain; charset=utf-8').send(`${message}\n`);

  app.options('/hls/*', PUBLIC, async (_req, reply) => reply.code(204).headers(CORS).send());

  type PlaylistRequest = FastifyRequest<{ Params: { playbackId: string }; Querystring: { _HLS_msn?: string; _HLS_part?: string } }>;
  const playlist = (ll: boolean) => async (req: PlaylistRequest, reply: FastifyReply) => {
      const hls = await packager(req.params.playbackId);
      if (!hls) return fail(reply, 404, 'no live HLS for this playback id');
      const blockMs = 3 * hls.targetDuration * 1000;
      if (!hls.hasMedia && !(await hls.waitForMedia(opts.firstMediaWaitMs ?? blockMs))) return fail(reply.header('retry-after', '1'), 404, 'stream not live yet');
      const msn = req.query._HLS_msn !== undefined ? Number(req.query._HLS_msn) : undefined;
      const part = req.query._HLS_part !== undefined ? Number(req.query._HLS_part) : undefined;
      if (ll && msn !== undefined) {
        if (!Number.isInteger(msn) || msn < 0 || (part !== undefined && (!Number.isInteger(part) || part < 0))) return fail(reply, 400, 'bad _HLS_msn/_HLS_part');
        if (msn > hls.lastMsn + 2) return fail(reply, 400, `_HLS_msn ${msn} is too far ahead of ${hls.lastMsn}`);
        if (!(await hls.waitFor(msn, part, blockMs))) return fail(reply, 503, 'playlist update did not come in time');
      }
      return reply.code(200).headers({ ...CORS, 'cache-control': 'no-cache' }).type(PLAYLIST).send(hls.playlist(ll ? 'll' : 'plain'));
  };
  app.get('/hls/:playbackId/index.m3u8', PUBLIC, playlist(true));
  app.get('/hls/:playbackId/plain.m3u8', PUBLIC, playlist(false));

  app.get<{ Params: { playbackId: string; file: string } }>('/hls/:playbackId/:file', PUBLIC, async (req, reply) => {
    const hls = await packager(req.params.playbackId);
    if (!hls) return fail(reply, 404, 'no live HLS for this playback id');
    const { file } = req.params;
    let body: Buffer | undefined;
    let m: RegExpExecArray | null;
    if ((m = /^init(\d+)\.mp4$/.exec(file))) body = hls.initSegment(Number(m[1]));
    else if ((m = /^seg(\d+)\.m4s$/.exec(file))) body = hls.segment(Number(m[1]));
    else if ((m = /^part(\d+)\.(\d+)\.m4s$/.exec(file))) body = await hls.part(Number(m[1]), Number(m[2]), 3 * hls.targetDuration * 1000);
    if (!body) return fail(reply, 404, 'no such segment (expired or not yet produced)');
    // Media files never change once published; the window moves past them within seconds.
    return reply.code(200).headers({ ...CORS, 'cache-control': 'public, max-age=60' }).type('video/mp4').send(body);
  });
}

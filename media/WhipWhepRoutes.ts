/**
 * WHIP (RFC 9725) and WHEP (draft-ietf-wish-whep) HTTP endpoints, as an encapsulated fastify
 * plugin with its own body parsers and error handler (replies are plain text, as WHIP clients
 * log them; they do not use the REST API's JSON envelope).
 *
 *   POST    /live/:streamId/whip      application/sdp, Bearer <stream_key> → 201 + Location + ETag + Link
 *   POST    /live/:playbackId/whep    application/sdp → 201 + Location (viewer held until video flows)
 *   PATCH   /live/sessions/:sessionId application/trickle-ice-sdpfrag → 204 (trickle) | 422 (ICE restart: unsupported)
 *   DELETE  /live/sessions/:sessionId → 200
 *   OPTIONS on all three → 204 with CORS and Accept-Post/Accept-Patch
 *
 * Session URLs carry 128 random bits (RFC 9725 §5: unguessable), so PATCH/DELETE need no token.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { MediaError } from './errors.ts';
import type { MediaNode } from './MediaNode.ts';
import { parseSdpFrag } from './Sdp.ts';

const SDP = 'application/sdp';
const SDPFRAG = 'application/trickle-ice-sdpfrag';

const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-methods': 'OPTIONS, POST, PATCH, DELETE',
  'access-control-allow-headers': 'Authorization, Content-Type, If-Match',
  'access-control-expose-headers': 'Location, Link, ETag, Accept-Post, Accept-Patch',
};

// The control app's auth hook skips routes marked public; WHIP checks its own Bearer token.
const PUBLIC = { config: { public: true } } as Record<string, unknown>;

function mediaType(req: FastifyRequest): string {
  return (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
}

function bearer(req: FastifyRequest): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  return m?.[1];
}

/** RFC 9725 §4.6: `Link: <stun:…>; rel="ice-server"` (+ username/credential for TURN). */
function iceLinks(node: MediaNode): string[] {
  const links: string[] = [];
  for (const server of node.options.iceServers ?? []) {
    const urls = Array.isArray(server.urls) ? server.urls : [server.urls];
    for (const url of urls) {
      let link = `<${url}>; rel="ice-server"`;
      if (server.username !== undefined && server.credential !== undefined) {
        link += `; username="${server.username}"; credential="${server.credential}"; credential-type="password"`;
      }
      links.push(link);
    }
  }
  return links;
}

function fail(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).headers(CORS).type('text/plain; charset=utf-8').send(`${message}\n`);
}

export async function whipWhepRoutes(app: FastifyInstance, opts: { node: MediaNode }): Promise<void> {
  const { node } = opts;
  const bodyLimit = node.settings.maxSdpBytes;

  app.addContentTypeParser([SDP, SDPFRAG], { parseAs: 'string', bodyLimit }, (_req, body, done) => done(null, body));

  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    if (err instanceof MediaError) return fail(reply, err.httpStatus, err.message);
    const status = err.statusCode ?? 500;
    if (status >= 500) req.log.error({ err }, 'whip/whep | request failed');
    if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return fail(reply, 415, `unsupported content type; send ${SDP}`);
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return fail(reply, 413, `body larger than ${bodyLimit} bytes`);
    return fail(reply, status, status >= 500 ? 'internal error' : err.message);
  });

  const options = (accept: Record<string, string>) => async (_req: FastifyRequest, reply: FastifyReply) => {
    const links = iceLinks(node);
    reply.code(204).headers({ ...CORS, ...accept });
    // RFC 9725 §4.6: ICE servers MAY be returned on non-preflight OPTIONS (MediaMTX clients read them).
    if (links.length > 0) reply.header('link', links);
    return reply.send();
  };
  app.options('/live/:streamId/whip', PUBLIC, options({ 'accept-post': SDP }));
  app.options('/live/:playbackId/whep', PUBLIC, options({ 'accept-post': SDP }));
  app.options('/live/sessions/:sessionId', PUBLIC, options({ 'accept-patch': SDPFRAG }));

  const answered = (reply: FastifyReply, r: { sessionId: string; answer: string; etag: string }) => {
    reply.code(201).headers({ ...CORS, location: node.sessionUrl(r.sessionId), etag: r.etag, 'accept-patch': SDPFRAG }).type(SDP);
    const links = iceLinks(node);
    if (links.length > 0) reply.header('link', links);
    return reply.send(r.answer);
  };

  app.post<{ Params: { streamId: string }; Body: unknown }>('/live/:streamId/whip', PUBLIC, async (req, reply) => {
    if (mediaType(req) !== SDP) return fail(reply, 415, `unsupported content type; send ${SDP}`);
    const token = bearer(req);
    if (!token) return fail(reply.header('www-authenticate', 'Bearer'), 401, 'missing Bearer token (the stream key)');
    const ingest = await node.options.resolveIngest(req.params.streamId, token);
    if (!ingest) return fail(reply.header('www-authenticate', 'Bearer error="invalid_token"'), 401, 'invalid stream key');
    // OBS shows the status line and body: a valid key that may not stream now is not a 401.
    if ('refused' in ingest) return fail(reply, 402, ingest.refused);
    if (typeof req.body !== 'string' || req.body.length === 0) return fail(reply, 400, 'empty SDP offer');
    return answered(reply, await node.publish(ingest.streamId, ingest.params, req.body, { rtmpUrl: ingest.outputRtmpUrl }));
  });

  app.post<{ Params: { playbackId: string }; Body: unknown }>('/live/:playbackId/whep', PUBLIC, async (req, reply) => {
    if (mediaType(req) !== SDP) return fail(reply, 415, `unsupported content type; send ${SDP}`);
    const playback = await node.options.resolvePlayback(req.params.playbackId);
    if (!playback) return fail(reply, 404, 'unknown playback id');
    if (typeof req.body !== 'string' || req.body.length === 0) return fail(reply, 400, 'empty SDP offer');
    return answered(reply, await node.play(playback.streamId, req.body));
  });

  app.patch<{ Params: { sessionId: string }; Body: unknown }>('/live/sessions/:sessionId', PUBLIC, async (req, reply) => {
    const entry = node.getSession(req.params.sessionId);
    if (!entry) return fail(reply, 404, 'unknown session');
    if (mediaType(req) !== SDPFRAG) return fail(reply, 415, `unsupported content type; send ${SDPFRAG}`);
    const ifMatch = req.headers['if-match'];
    const frag = parseSdpFrag(typeof req.body === 'string' ? req.body : '', node.settings.maxSdpBytes);
    const restart = ifMatch === '*' || (frag.iceUfrag !== undefined && frag.iceUfrag !== entry.session.remoteIceUfrag);
    // RFC 9725 §4.3.2: a server doing trickle but not restart answers 422 to a restart request.
    if (restart) return fail(reply, 422, 'ICE restart is not supported; start a new session');
    if (ifMatch !== undefined && ifMatch !== entry.session.etag) return fail(reply, 412, 'ETag does not match the session');
    await entry.session.addCandidates(frag.candidates);
    return reply.code(204).headers(CORS).send();
  });

  app.delete<{ Params: { sessionId: string } }>('/live/sessions/:sessionId', PUBLIC, async (req, reply) => {
    const entry = node.getSession(req.params.sessionId);
    if (!entry) return fail(reply, 404, 'unknown session');
    entry.session.close('deleted');
    // OBS expects exactly 200 (it only warns otherwise).
    return reply.code(200).headers(CORS).send();
  });
}

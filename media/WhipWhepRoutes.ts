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
 * Session URLs carry 128 random bits (RFC 9725 §5: unguessable) and are given to nobody but the
 * client (Location): nothing else carries them (TURN usernames are random, IceServers.ts). A
 * publisher's session also needs its stream key on PATCH and DELETE, as at creation (RFC 9725
 * §4.7: the client sends the token on every request to the session; OBS does): its id shows in
 * the owner's stream status and in logs, and ending it takes a stream off the air. Without the
 * key → 401, and the session runs on. A viewer's session URL is its only credential (a viewer
 * has no key, and ending a viewer ends no stream).
 *
 * Admission (MediaNodeOptions.admit): once the stream key (WHIP) or the playback id (WHEP) has
 * resolved, the stream's or its account's admission rule (an HTTP hook or a JWT rule) is asked
 * before any session, peer connection or slot exists; a refusal is 401 (with a Bearer challenge)
 * or 403. The token it sees is `?jwt=`, or a viewer's `Authorization: Bearer`; never a stream key.
 *
 * Abuse bounds (settings): WHIP and WHEP POSTs are rate-limited per client address (before the
 * key is checked, so keys cannot be guessed fast) and WHEP per playback id; a node at capacity
 * answers a publisher 503 + Retry-After and builds nothing, while viewers (keyless) never take a
 * node slot: those waiting for a stream without a publisher are bounded per stream and per owning
 * account (429 + Retry-After, MediaNode.play); every SDP body is checked line by line against its
 * grammar before any object exists (SdpGrammar.ts: 400 naming the line); trickled candidates are capped per request and per
 * session and filtered like offer candidates (no loopback, link-local, multicast or unspecified
 * addresses), so a keyless client cannot make the node send STUN to arbitrary local ports.
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { MediaError } from './errors.ts';
import { clientAddress, edgePullOf } from './NodeSignatures.ts';
import { iceServerLinks, type TurnRole } from './webrtc/IceServers.ts';
import { sessionKeyDigest, type AdmissionRequest, type AdmissionVerdict, type MediaNode, type SessionEntry } from './MediaNode.ts';
import type { RateLimiter } from './RateLimiter.ts';
import { parseSdpFrag, refuseRemoteCandidate } from './webrtc/Sdp.ts';

const SDP = 'application/sdp';
/** Candidates taken from one trickle PATCH, and from all of a session's PATCHes. */
export const MAX_TRICKLE_CANDIDATES = { perRequest: 20, perSession: 64 } as const;
const SDPFRAG = 'application/trickle-ice-sdpfrag';
/** Query parameters passed to an admission rule at most (the rest are left out). */
const MAX_ADMISSION_QUERY_PARAMS = 20;

/**
 * Asks the node's admission rule (MediaNodeOptions.admit) about a request, before anything is
 * built for it. The token is `?jwt=`; for viewers `Authorization: Bearer` too (a publisher's
 * Bearer is its stream key, which no rule ever sees).
 */
export async function askAdmission(
  node: MediaNode,
  req: FastifyRequest,
  what: Pick<AdmissionRequest, 'action' | 'protocol' | 'streamId' | 'clientIp'>,
): Promise<AdmissionVerdict> {
  const admit = node.options.admit;
  if (!admit) return { admitted: true };
  const query: Record<string, string> = {};
  for (const [k, v] of Object.entries((req.query ?? {}) as Record<string, unknown>)) {
    if (Object.keys(query).length >= MAX_ADMISSION_QUERY_PARAMS) break;
    // Blocking-reload parameters change with every LL-HLS request; they say nothing about the client.
    if (k.startsWith('_HLS_')) continue;
    const first = Array.isArray(v) ? v[0] : v;
    if (typeof first === 'string') query[k] = first;
  }
  const token = query['jwt'] ?? (what.action === 'read' ? (bearer(req) ?? null) : null);
  return admit({ ...what, query, token });
}

/** The reply of a refused admission: 401 with a Bearer challenge, or 403. */
export function refuseAdmission(reply: FastifyReply, verdict: { status: 401 | 403; reason: string }, cors: Record<string, string>): FastifyReply {
  if (verdict.status === 401) reply.header('www-authenticate', 'Bearer error="invalid_token"');
  return reply.code(verdict.status).headers(cors).type('text/plain; charset=utf-8').send(`${verdict.reason}\n`);
}

/**
 * CORS of every WHIP/WHEP answer, here and where an api replica forwards or redirects to a node
 * (control/LiveRouter.ts): browsers publish and play from any origin.
 */
export const WHIP_WHEP_CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-methods': 'OPTIONS, POST, PATCH, DELETE',
  'access-control-allow-headers': 'Authorization, Content-Type, If-Match',
  'access-control-expose-headers': 'Location, Link, ETag, Accept-Post, Accept-Patch',
};

/** The control app's auth hook skips routes marked public; WHIP checks its own Bearer token. */
export const PUBLIC_ROUTE = { config: { public: true } } as Record<string, unknown>;
/** WHIP POST needs no API key but the stream key: /openapi.json says so (scheme `streamKey` of control/buildApp.ts). */
export const WHIP_POST = { config: { public: true }, schema: { security: [{ streamKey: [] }] } } as Record<string, unknown>;

function mediaType(req: FastifyRequest): string {
  return (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
}

function bearer(req: FastifyRequest): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  return m?.[1];
}

/** Whether the request may change or end the session: a publisher's needs the key that created it. */
function mayControl(req: FastifyRequest, entry: SessionEntry): boolean {
  if (entry.kind === 'whep') return true;
  const token = bearer(req);
  return token !== undefined && timingSafeEqual(sessionKeyDigest(token), entry.keyDigest);
}

function fail(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).headers(WHIP_WHEP_CORS).type('text/plain; charset=utf-8').send(`${message}\n`);
}

/** 401 for a publisher session's PATCH/DELETE without its stream key (the session is untouched). */
function refuseControl(reply: FastifyReply): FastifyReply {
  return fail(reply.header('www-authenticate', 'Bearer'), 401, "a publisher's session needs its stream key: Authorization: Bearer <stream key>");
}

/** Counts one request against `limiter`; throws 429 with Retry-After when over. */
function limit(limiter: RateLimiter, key: string, what: string): void {
  const d = limiter.hit(key);
  if (!d.allowed) throw new MediaError('RATE_LIMITED', `too many ${what}; retry in ${Math.ceil(d.retryAfterMs / 1000)} s`, { retryAfterS: Math.ceil(d.retryAfterMs / 1000) });
}

export async function whipWhepRoutes(app: FastifyInstance, opts: { node: MediaNode }): Promise<void> {
  const { node } = opts;
  const bodyLimit = node.settings.maxSdpBytes;

  app.addContentTypeParser([SDP, SDPFRAG], { parseAs: 'string', bodyLimit }, (_req, body, done) => done(null, body));

  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    if (err instanceof MediaError) {
      if (err.retryAfterS !== undefined) reply.header('retry-after', String(err.retryAfterS));
      return fail(reply, err.httpStatus, err.message);
    }
    const status = err.statusCode ?? 500;
    if (status >= 500) req.log.error({ err }, 'whip/whep | request failed');
    if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return fail(reply, 415, `unsupported content type; send ${SDP}`);
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return fail(reply, 413, `body larger than ${bodyLimit} bytes`);
    return fail(reply, status, status >= 500 ? 'internal error' : err.message);
  });

  const options = (accept: Record<string, string>) => async (_req: FastifyRequest, reply: FastifyReply) => {
    const links = iceServerLinks(node.options, null);
    reply.code(204).headers({ ...WHIP_WHEP_CORS, ...accept });
    // RFC 9725 §4.6: ICE servers MAY be returned on non-preflight OPTIONS (MediaMTX clients read them).
    if (links.length > 0) reply.header('link', links);
    return reply.send();
  };
  app.options('/live/:streamId/whip', PUBLIC_ROUTE, options({ 'accept-post': SDP }));
  app.options('/live/:playbackId/whep', PUBLIC_ROUTE, options({ 'accept-post': SDP }));
  app.options('/live/sessions/:sessionId', PUBLIC_ROUTE, options({ 'accept-patch': SDPFRAG }));

  const answered = (reply: FastifyReply, role: TurnRole, r: { sessionId: string; answer: string; etag: string }) => {
    reply.code(201).headers({ ...WHIP_WHEP_CORS, location: node.sessionUrl(r.sessionId), etag: r.etag, 'accept-patch': SDPFRAG }).type(SDP);
    // A fresh TURN credential per answer, named by nothing of ours; a viewer's is short-lived (IceServers.ts).
    const links = iceServerLinks(node.options, role);
    if (links.length > 0) reply.header('link', links);
    return reply.send(r.answer);
  };

  app.post<{ Params: { streamId: string }; Body: unknown }>('/live/:streamId/whip', WHIP_POST, async (req, reply) => {
    limit(node.limits.whipPerAddress, clientAddress(req, node.options.forwardedSecret), 'publish requests from this address');
    if (mediaType(req) !== SDP) return fail(reply, 415, `unsupported content type; send ${SDP}`);
    const token = bearer(req);
    if (!token) return fail(reply.header('www-authenticate', 'Bearer'), 401, 'missing Bearer token (the stream key)');
    const ingest = await node.options.resolveIngest(req.params.streamId, token);
    if (!ingest) return fail(reply.header('www-authenticate', 'Bearer error="invalid_token"'), 401, 'invalid stream key');
    // OBS shows the status line and body: a valid key that may not stream now is not a 401.
    if ('refused' in ingest) return fail(reply, ingest.status ?? 402, ingest.refused);
    // The stream's admission rule, before any session or slot exists.
    const verdict = await askAdmission(node, req, { action: 'publish', protocol: 'whip', streamId: ingest.streamId, clientIp: clientAddress(req, node.options.forwardedSecret) });
    if (!verdict.admitted) return refuseAdmission(reply, verdict, WHIP_WHEP_CORS);
    if (typeof req.body !== 'string' || req.body.length === 0) return fail(reply, 400, 'empty SDP offer');
    return answered(reply, 'publisher', await node.publish(ingest.streamId, ingest.params, req.body, { rtmpUrl: ingest.outputRtmpUrl, rtmpDestinations: ingest.rtmpDestinations, record: ingest.record, soundtrack: ingest.soundtrack }, ingest.paramsStoredAt, token));
  });

  app.post<{ Params: { playbackId: string }; Body: unknown }>('/live/:playbackId/whep', PUBLIC_ROUTE, async (req, reply) => {
    const address = clientAddress(req, node.options.forwardedSecret);
    // An edge node's signed pull (decision 0030): its viewers were limited and admitted there.
    const edge = edgePullOf(req, node.options.forwardedSecret) ?? undefined;
    if (!edge) limit(node.limits.whepPerAddress, address, 'play requests from this address');
    if (mediaType(req) !== SDP) return fail(reply, 415, `unsupported content type; send ${SDP}`);
    const playback = await node.options.resolvePlayback(req.params.playbackId);
    if (!playback) return fail(reply, 404, 'unknown playback id');
    // Edges pull from the origin only, never from another edge (no chains of relays).
    if (edge && playback.origin) return fail(reply.header('retry-after', '2'), 503, 'this node is not the stream\'s origin; pull from the node that holds it');
    if (!edge) limit(node.limits.whepPerPlayback, playback.streamId, 'play requests for this stream');
    const verdict = edge ? { admitted: true as const } : await askAdmission(node, req, { action: 'read', protocol: 'whep', streamId: playback.streamId, clientIp: address });
    if (!verdict.admitted) return refuseAdmission(reply, verdict, WHIP_WHEP_CORS);
    if (typeof req.body !== 'string' || req.body.length === 0) return fail(reply, 400, 'empty SDP offer');
    // Another live node holds the stream: this one relays it (an edge), pulling it once from there.
    const relay = playback.origin ? { origin: `${playback.origin.url.replace(/\/+$/, '')}/live/${encodeURIComponent(req.params.playbackId)}/whep` } : undefined;
    return answered(reply, 'viewer', await node.play(playback.streamId, req.body, { address, edge }, playback.accountId, relay));
  });

  app.patch<{ Params: { sessionId: string }; Body: unknown }>('/live/sessions/:sessionId', PUBLIC_ROUTE, async (req, reply) => {
    const entry = node.getSession(req.params.sessionId);
    if (!entry) return fail(reply, 404, 'unknown session');
    if (!mayControl(req, entry)) return refuseControl(reply);
    if (mediaType(req) !== SDPFRAG) return fail(reply, 415, `unsupported content type; send ${SDPFRAG}`);
    const ifMatch = req.headers['if-match'];
    const frag = parseSdpFrag(typeof req.body === 'string' ? req.body : '', node.settings.maxSdpBytes);
    const restart = ifMatch === '*' || (frag.iceUfrag !== undefined && frag.iceUfrag !== entry.session.remoteIceUfrag);
    // RFC 9725 §4.3.2: a server doing trickle but not restart answers 422 to a restart request.
    if (restart) return fail(reply, 422, 'ICE restart is not supported; start a new session');
    if (ifMatch !== undefined && ifMatch !== entry.session.etag) return fail(reply, 412, 'ETag does not match the session');
    if (frag.candidates.length > MAX_TRICKLE_CANDIDATES.perRequest) return fail(reply, 413, `at most ${MAX_TRICKLE_CANDIDATES.perRequest} candidates per request`);
    const malformed = frag.candidates.find((c) => refuseRemoteCandidate(c.candidate, { allowLoopback: true }) === 'malformed');
    if (malformed) return fail(reply, 400, 'malformed candidate line');
    // Addresses the node must never dial are dropped quietly (RFC 8838 lets an agent ignore candidates).
    const usable = frag.candidates.filter((c) => refuseRemoteCandidate(c.candidate, { allowLoopback: node.servesLoopback }) === null);
    const room = MAX_TRICKLE_CANDIDATES.perSession - entry.trickled;
    const taken = usable.slice(0, Math.max(0, room));
    entry.trickled += taken.length;
    await entry.session.addCandidates(taken);
    return reply.code(204).headers(WHIP_WHEP_CORS).send();
  });

  app.delete<{ Params: { sessionId: string } }>('/live/sessions/:sessionId', PUBLIC_ROUTE, async (req, reply) => {
    const entry = node.getSession(req.params.sessionId);
    if (!entry) return fail(reply, 404, 'unknown session');
    if (!mayControl(req, entry)) return refuseControl(reply);
    entry.session.close('deleted');
    // OBS expects exactly 200 (it only warns otherwise).
    return reply.code(200).headers(WHIP_WHEP_CORS).send();
  });
}

/**
 * Shared set-up for the media tests: a fastify server on 127.0.0.1 with a MediaNode's WHIP/WHEP
 * routes and a test page (`/peer.html`) whose script publishes the fake camera over WHIP and
 * plays WHEP into a <video>, reading decoded frames back through a canvas.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import pino from 'pino';
import { createProcessorChain } from '../../native/processors/ProcessorChain.ts';
import { mergeParams, planChange, type ParamsPatch } from '../../native/params/index.ts';
import { HlsOutput, ImageChainProcessor, MediaNode, PRIMARY_RTMP, RtmpOutputs, WhepOutput, registerMediaRoutes, type FrameProcessorFactory, type MediaNodeOptions, type MediaSettings, type OutboundPolicy, type LiveParams } from '../../media/index.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export const STREAM_ID = 'str_test';

/**
 * What the API does for a PATCH, for a stream the test's node holds: the change merged, checked and
 * planned once over the params the stream holds (defaults filled), then handed to the node.
 */
export function patchStream(node: MediaNode, streamId: string, patch: ParamsPatch) {
  return node.updateParams(streamId, planChange(mergeParams(null, node.getStream(streamId)?.params ?? {}), patch));
}

/** A held stream's WHEP viewers (counts by codec, the VP8 branch, the audio hold), or undefined. */
export const whepOf = (node: MediaNode, streamId: string) => node.getStream(streamId)?.readers.find(WhepOutput)?.stats();
/** A held stream's LL-HLS packager stats, or undefined. */
export const hlsOf = (node: MediaNode, streamId: string) => node.getStream(streamId)?.readers.find(HlsOutput)?.packager.stats();
/** A held stream's push to output_rtmp_url, or null/undefined. */
export const rtmpOf = (node: MediaNode, streamId: string) => node.getStream(streamId)?.readers.find(RtmpOutputs)?.pushStatus(PRIMARY_RTMP);
export const STREAM_KEY = 'sk_test_secret';
/** A valid key of an account that may not stream now (its allowance is used up): WHIP 402. */
export const REFUSED_KEY = 'sk_test_out_of_allowance';
export const PLAYBACK_ID = 'play_test';

/** Real native image processors (canny, blur…), no diffusion stage. */
export const nativeImageProcessors: FrameProcessorFactory = async (params) =>
  new ImageChainProcessor(createProcessorChain as ConstructorParameters<typeof ImageChainProcessor>[0], params);

export interface MediaServer {
  app: FastifyInstance;
  node: MediaNode;
  baseUrl: string;
  whipUrl: string;
  whepUrl: string;
}

export async function startMediaServer(
  t: Teardown,
  opts: {
    params?: LiveParams;
    settings?: Partial<MediaSettings>;
    createProcessor?: FrameProcessorFactory;
    stunUrls?: string[];
    turn?: { urls: string[]; secret: string; ttlS: number; viewerTtlS?: number };
    /** The stream's output_rtmp_url: the node pushes there while the publisher is live. */
    outputRtmpUrl?: string;
    /** Streams the node holds with a publisher at most. */
    capacity?: number;
    /** Secret of signed forwarded client addresses (x-reverie-forwarded). */
    forwardedSecret?: string;
    /** Address rules for the RTMP push. */
    outboundPolicy?: OutboundPolicy;
    /** Receives every log line (JSON) at debug level, instead of LOG_LEVEL's silence. */
    onLog?: (line: string) => void;
    /** Replaces the harness's key check (tests that hold a grant back). */
    resolveIngest?: MediaNodeOptions['resolveIngest'];
    /** The account owning a stream (what resolvePlayback says); default: none (each stream its own owner). */
    accountOf?: (streamId: string) => string;
    /** The blob store's `songs/` folder: where the node reads a soundtrack's take. */
    songsDir?: string;
    /** Another node holds the harness's streams: this one relays them as an edge (what resolvePlayback says). */
    origin?: () => { nodeId: string; url: string } | undefined;
  } = {},
): Promise<MediaServer> {
  const onLog = opts.onLog;
  const logger = onLog ? pino({ level: 'debug' }, { write: (line: string) => onLog(line) }) : pino({ level: process.env['LOG_LEVEL'] ?? 'silent' });
  const app = Fastify({ logger: false });
  let baseUrl = '';
  const node = new MediaNode({
    get publicUrl() {
      return baseUrl;
    },
    iceAddresses: ['127.0.0.1'],
    ...(opts.stunUrls ? { stunUrls: opts.stunUrls } : {}),
    ...(opts.turn ? { turn: opts.turn } : {}),
    logger,
    settings: opts.settings,
    ...(opts.capacity !== undefined ? { capacity: opts.capacity } : {}),
    ...(opts.forwardedSecret ? { forwardedSecret: opts.forwardedSecret } : {}),
    ...(opts.outboundPolicy ? { outboundPolicy: opts.outboundPolicy } : {}),
    ...(opts.songsDir ? { songsDir: opts.songsDir } : {}),
    createProcessor: opts.createProcessor ?? nativeImageProcessors,
    // STREAM_ID and any other `str_test…` id take STREAM_KEY; their playback ids are `play_test…`.
    resolveIngest: opts.resolveIngest ?? (async (streamId, token) =>
      !streamId.startsWith(STREAM_ID) ? null
      : token === STREAM_KEY ? { streamId, params: opts.params ?? { width: 256, height: 256 }, outputRtmpUrl: opts.outputRtmpUrl }
      : token === REFUSED_KEY ? { refused: 'streaming allowance used up' }
      : null),
    resolvePlayback: async (playbackId) => {
      if (!playbackId.startsWith(PLAYBACK_ID)) return null;
      const streamId = STREAM_ID + playbackId.slice(PLAYBACK_ID.length);
      return { streamId, ...(opts.accountOf ? { accountId: opts.accountOf(streamId) } : {}), origin: opts.origin?.() };
    },
  });
  registerMediaRoutes(app, node);
  app.get('/peer.html', async (_req, reply) => reply.type('text/html').send(PEER_PAGE));
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('no address');
  baseUrl = `http://127.0.0.1:${address.port}`;
  t.teardown(async () => {
    node.close();
    await app.close();
  });
  return { app, node, baseUrl, whipUrl: `${baseUrl}/live/${STREAM_ID}/whip`, whepUrl: `${baseUrl}/live/${PLAYBACK_ID}/whep` };
}

/** Browser-side API the tests drive with page.evaluate. */
export interface PeerPage {
  publish(o: { url: string; token: string; codec: 'VP8' | 'H264'; width: number; height: number }): Promise<{ status: number; location: string | null; etag: string | null; body: string }>;
  /** OBS's WHIP behaviour: H.264 42e01f pm=1 only, an offer with no candidates, never trickles. */
  publishObsLike(o: { url: string; token: string }): Promise<{ status: number; location: string | null; offer: string; body: string }>;
  /** Plays WHEP; `codec` restricts the viewer's offer to that codec (setCodecPreferences). */
  play(o: { url: string; codec?: 'VP8' | 'H264' }): Promise<{ status: number; location: string | null; body: string }>;
  waitFrames(n: number, timeoutMs: number): Promise<number>;
  /** Starts logging every presented frame of the WHEP player into frameLog (see PEER_PAGE). */
  trackFrames(): void;
  /** Per presented frame since trackFrames(): [arrival, ms on the page's clock; the publisher's stamped picture (else slate)]. */
  frameLog: [number, boolean][] | null;
  frameStats(): { width: number; height: number; extremeFraction: number; meanLuma: number; meanRgb: [number, number, number]; framesDecoded: number };
  pubStats(): Promise<{ codec: string | undefined; framesEncoded: number; pliCount: number; nackCount: number }>;
  /** The viewer's inbound video: negotiated codec and decoder counters. */
  viewStats(): Promise<{ codec: string | undefined; framesDecoded: number; keyFramesDecoded: number; pliCount: number }>;
}

export const PEER_PAGE = `<!doctype html><html><body><video id="v" autoplay muted playsinline></video><canvas id="c"></canvas><script>
async function gathered(pc) {
  if (pc.iceGatheringState === 'complete') return;
  await new Promise((resolve) => {
    const done = () => { if (pc.iceGatheringState === 'complete') resolve(); };
    pc.addEventListener('icegatheringstatechange', done);
    setTimeout(resolve, 2000);
  });
}
window.publish = async ({ url, token, codec, width, height }) => {
  const media = await navigator.mediaDevices.getUserMedia({ video: { width, height, frameRate: 30 }, audio: true });
  const pc = new RTCPeerConnection();
  window.pub = pc;
  const vt = pc.addTransceiver(media.getVideoTracks()[0], { direction: 'sendonly', streams: [media] });
  pc.addTransceiver(media.getAudioTracks()[0], { direction: 'sendonly', streams: [media] });
  const caps = RTCRtpSender.getCapabilities('video').codecs;
  const prefs = caps.filter((c) => c.mimeType === 'video/' + codec && (codec !== 'H264' || /packetization-mode=1/.test(c.sdpFmtpLine || '')));
  vt.setCodecPreferences(prefs);
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp', Authorization: 'Bearer ' + token }, body: pc.localDescription.sdp });
  const body = await res.text();
  if (res.status === 201) await pc.setRemoteDescription({ type: 'answer', sdp: body });
  return { status: res.status, location: res.headers.get('location'), etag: res.headers.get('etag'), body };
};
window.publishObsLike = async ({ url, token }) => {
  const media = await navigator.mediaDevices.getUserMedia({ video: { width: 320, height: 240, frameRate: 30 }, audio: true });
  const pc = new RTCPeerConnection();
  window.pub = pc;
  pc.addTransceiver(media.getAudioTracks()[0], { direction: 'sendonly', streams: [media] });
  const vt = pc.addTransceiver(media.getVideoTracks()[0], { direction: 'sendonly', streams: [media] });
  const h264 = RTCRtpSender.getCapabilities('video').codecs.find((c) => c.mimeType === 'video/H264' && /42e01f/.test(c.sdpFmtpLine || '') && /packetization-mode=1/.test(c.sdpFmtpLine || ''));
  vt.setCodecPreferences([h264]);
  await pc.setLocalDescription(await pc.createOffer());
  const offer = pc.localDescription.sdp.split('\\r\\n').filter((l) => !l.startsWith('a=candidate:') && l !== 'a=end-of-candidates').join('\\r\\n');
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp', Authorization: 'Bearer ' + token }, body: offer });
  const body = await res.text();
  if (res.status === 201) await pc.setRemoteDescription({ type: 'answer', sdp: body });
  return { status: res.status, location: res.headers.get('location'), offer, body };
};
window.frames = 0;
// Per-frame log for gap measurements, off until trackFrames(): [arrival ms, stamped] per presented
// frame. Arrival is when its last packet came (receiveTime: no render or vsync jitter), else when it
// was presented; stamped: every block centre of stampedH264's 4×4 counter grid is black or white
// (the publisher's picture, not the slate's uniform or greyed picture).
window.frameLog = null;
window.trackFrames = () => { window.frameLog = []; };
function logFrame(v, now, meta) {
  const w = v.videoWidth, h = v.videoHeight;
  if (w === 0) return;
  const c = document.getElementById('c');
  if (c.width !== w || c.height !== h) { c.width = w; c.height = h; }
  const g = c.getContext('2d', { willReadFrequently: true });
  g.drawImage(v, 0, 0);
  let black = 0, white = 0;
  for (let i = 0; i < 16; i++) {
    const d = g.getImageData(Math.floor(((i % 4) + 0.5) * w / 4), Math.floor((Math.floor(i / 4) + 0.5) * h / 4), 1, 1).data;
    const y = 0.299 * d[0] + 0.587 * d[1] + 0.114 * d[2];
    if (y < 60) black++;
    else if (y > 195) white++;
  }
  // Every counter has a white block; the plain slate (luma ≈ 56) has none, the greyed one no extreme.
  window.frameLog.push([meta.receiveTime ?? now, black + white === 16 && white > 0]);
}
window.play = async ({ url, codec }) => {
  const pc = new RTCPeerConnection();
  window.view = pc;
  const vt = pc.addTransceiver('video', { direction: 'recvonly' });
  if (codec) vt.setCodecPreferences(RTCRtpReceiver.getCapabilities('video').codecs.filter((c) => c.mimeType === 'video/' + codec));
  pc.addTransceiver('audio', { direction: 'recvonly' });
  const v = document.getElementById('v');
  pc.ontrack = (e) => { if (e.track.kind === 'video') { v.srcObject = new MediaStream([e.track]); v.play().catch(() => {}); } };
  const count = (now, meta) => { window.frames++; if (window.frameLog) logFrame(v, now, meta); v.requestVideoFrameCallback(count); };
  v.requestVideoFrameCallback(count);
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  const body = await res.text();
  if (res.status === 201) await pc.setRemoteDescription({ type: 'answer', sdp: body });
  return { status: res.status, location: res.headers.get('location'), body };
};
window.waitFrames = async (n, timeoutMs) => {
  const start = window.frames, t0 = performance.now();
  while (window.frames - start < n && performance.now() - t0 < timeoutMs) await new Promise((r) => setTimeout(r, 50));
  return window.frames - start;
};
window.lastDecoded = 0;
window.frameStats = () => {
  const v = document.getElementById('v'), c = document.getElementById('c');
  c.width = v.videoWidth; c.height = v.videoHeight;
  const g = c.getContext('2d', { willReadFrequently: true });
  g.drawImage(v, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  let extreme = 0, sum = 0, r = 0, gg = 0, b = 0;
  for (let i = 0; i < d.length; i += 4) {
    const y = 0.299 * d[i] + 0.587 * d[i + 1] + 0.114 * d[i + 2];
    sum += y; r += d[i]; gg += d[i + 1]; b += d[i + 2];
    if (y < 24 || y > 232) extreme++;
  }
  const px = d.length / 4 || 1;
  return { width: c.width, height: c.height, extremeFraction: extreme / px, meanLuma: sum / px, meanRgb: [r / px, gg / px, b / px], framesDecoded: window.frames };
};
window.pubStats = async () => {
  const out = { codec: undefined, framesEncoded: 0, pliCount: 0, nackCount: 0 };
  const stats = await window.pub.getStats();
  const codecs = {};
  stats.forEach((s) => { if (s.type === 'codec') codecs[s.id] = s.mimeType; });
  stats.forEach((s) => { if (s.type === 'outbound-rtp' && s.kind === 'video') { out.codec = codecs[s.codecId]; out.framesEncoded = s.framesEncoded; out.pliCount = s.pliCount; out.nackCount = s.nackCount; } });
  return out;
};
window.viewStats = async () => {
  const out = { codec: undefined, framesDecoded: 0, keyFramesDecoded: 0, pliCount: 0 };
  const stats = await window.view.getStats();
  const codecs = {};
  stats.forEach((s) => { if (s.type === 'codec') codecs[s.id] = s.mimeType; });
  stats.forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') { out.codec = codecs[s.codecId]; out.framesDecoded = s.framesDecoded; out.keyFramesDecoded = s.keyFramesDecoded; out.pliCount = s.pliCount; } });
  return out;
};
</script></body></html>`;

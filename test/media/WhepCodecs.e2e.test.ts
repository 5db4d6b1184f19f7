/**
 * Encode once per codec, with real peers: viewers whose WebRTC stack has no H.264 (@roamhq/wrtc,
 * a libwebrtc build without it; Chromium told to prefer VP8) are served by the stream's VP8
 * branch, which runs while VP8 viewers exist and serves all of them from one encoder; H.264
 * viewers of the same stream keep the x264 output.
 */
import t from 'tap';
import { RTCPeerConnection, RTCRtpCodecParameters, type RtpPacket } from 'werift';
import { launchChromium } from '../helpers/chromium.ts';
import { patchStream, whepOf, STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from './harness.ts';
import { wrtcPublish, wrtcView, type WrtcFrameReport } from './wrtcPeers.ts';

type W = Window & PeerPage;

const CANNY = { image_postprocessing: { enabled: true, processors: [{ type: 'canny', enabled: true, params: { low_threshold: 100, high_threshold: 200 } }] } };
const NONE = { image_postprocessing: { enabled: true, processors: [] } };

/** BT.601 limited-range YUV means → RGB. */
function rgbOf(r: WrtcFrameReport): [number, number, number] {
  const y = 1.164 * (r.meanY - 16);
  const u = r.meanU - 128;
  const v = r.meanV - 128;
  return [y + 1.596 * v, y - 0.813 * v - 0.391 * u, y + 2.018 * u];
}

/** True if the packet starts a VP8 key frame (RFC 7741 descriptor, then the RFC 6386 frame tag). */
function startsVp8Keyframe(payload: Buffer): boolean {
  const b0 = payload[0] ?? 0;
  if ((b0 & 0x10) === 0) return false; // not the start of a partition 0
  let off = 1;
  if (b0 & 0x80) {
    const x = payload[off++] ?? 0;
    if (x & 0x80) off += (payload[off] ?? 0) & 0x80 ? 2 : 1;
    if (x & 0x40) off++;
    if (x & 0x30) off++;
  }
  return ((payload[off] ?? 1) & 0x01) === 0;
}

async function del(location: string | null): Promise<number> {
  return (await fetch(location ?? '', { method: 'DELETE' })).status;
}

t.test('a @roamhq/wrtc WHEP viewer (no H.264) gets VP8 and decodes the processed picture', { timeout: 90_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256, ...NONE } });
  const started = new Promise<void>((resolve) => srv.node.once('started', () => resolve()));
  const orange: [number, number, number] = [230, 120, 40];
  const pub = await wrtcPublish(t, srv.whipUrl, orange);
  t.equal(pub.status, 201, 'wrtc publisher WHIP POST → 201');
  await started;
  t.equal(whepOf(srv.node, STREAM_ID)?.vp8.running, false, 'no VP8 viewer yet: the VP8 branch is not running');

  const viewer = await wrtcView(t, srv.whepUrl);
  t.equal(viewer.status, 201, 'wrtc viewer WHEP POST → 201');
  t.notOk(viewer.offerCodecs.includes('H264'), `the wrtc offer has no H.264 (${viewer.offerCodecs.join(',')})`);
  t.same(viewer.answerCodecs, ['VP8'], 'the answer names VP8 only');

  const plain = await viewer.waitReport((r) => r.frames >= 20, 30_000);
  t.equal(plain.width, 256, 'decoded frame width = stream width');
  t.equal(plain.height, 256, 'decoded frame height = stream height');
  const rgb = rgbOf(plain);
  t.ok(rgb.every((c, i) => Math.abs(c - (orange[i] as number)) < 25), `passthrough: the viewer sees the published colour (${rgb.map((c) => c.toFixed(0)).join(',')} vs ${orange.join(',')})`);
  const status = whepOf(srv.node, STREAM_ID);
  t.same(status?.viewersByCodec, { H264: 0, VP8: 1 }, 'status counts one VP8 viewer');
  t.equal(status?.vp8.running, true, 'the VP8 branch runs');
  t.equal(status?.vp8.starts, 1, 'started once');
  t.ok((status?.vp8.framesOut ?? 0) >= 20, `VP8 frames encoded (${status?.vp8.framesOut})`);

  // Canny on a solid colour has no edges: the processed picture turns black.
  patchStream(srv.node, STREAM_ID, CANNY);
  const edges = await viewer.waitReport((r) => r.frames >= plain.frames + 10 && r.meanY < 30, 20_000);
  t.ok(edges.extremeFraction > 0.9, `after the canny update the VP8 viewer sees the processor's output (meanY ${edges.meanY.toFixed(1)}, extreme ${edges.extremeFraction.toFixed(3)})`);
  const more = await viewer.waitReport((r) => r.frames >= edges.frames + 10, 10_000);
  t.ok(more.frames > edges.frames, 'frames keep arriving');

  t.equal(await del(viewer.location), 200, 'WHEP DELETE → 200');
  viewer.closePeer();
  const after = whepOf(srv.node, STREAM_ID);
  t.same(after?.viewersByCodec, { H264: 0, VP8: 0 }, 'no viewers left');
  t.equal(after?.vp8.running, false, 'the VP8 branch stopped with its last viewer');
  t.equal(srv.node.status(STREAM_ID)?.state, 'live', 'the stream itself goes on');
});

t.test('Chromium H.264 and VP8 viewers of one stream play at once; VP8 viewers share one encoder that stops after the last leaves', { timeout: 120_000 }, async (t) => {
  const srv = await startMediaServer(t, { params: { width: 256, height: 256, ...CANNY } });
  const ctx = await launchChromium(t);
  const open = async () => {
    const page = await ctx.newPage();
    await page.goto(`${srv.baseUrl}/peer.html`);
    return page;
  };
  const [pub, h264, vp8a, vp8b] = [await open(), await open(), await open(), await open()];
  const started = new Promise<void>((resolve) => srv.node.once('started', () => resolve()));
  const published = await pub.evaluate((o) => (window as unknown as W).publish(o), { url: srv.whipUrl, token: STREAM_KEY, codec: 'H264' as const, width: 320, height: 240 });
  t.equal(published.status, 201, 'Chromium WHIP POST → 201');
  await started;

  const playH264 = await h264.evaluate((url) => (window as unknown as W).play({ url }), srv.whepUrl);
  const playA = await vp8a.evaluate((url) => (window as unknown as W).play({ url, codec: 'VP8' }), srv.whepUrl);
  t.equal(playH264.status, 201, 'H.264 viewer → 201');
  t.equal(playA.status, 201, 'VP8-forced viewer → 201');
  t.match(playA.body, /VP8\/90000/, 'the VP8 viewer is answered VP8');
  t.notMatch(playA.body, /H264/, 'and nothing else');

  for (const [name, page] of [['H.264', h264], ['VP8', vp8a]] as const) {
    const n = await page.evaluate(() => (window as unknown as W).waitFrames(20, 30_000));
    t.ok(n >= 20, `${name} viewer decoded ${n} frames`);
    const stats = await page.evaluate(() => (window as unknown as W).frameStats());
    t.equal(stats.width, 256, `${name} viewer frame width = stream width`);
    t.ok(stats.extremeFraction > 0.85, `${name} viewer sees canny output (extreme fraction ${stats.extremeFraction.toFixed(3)})`);
  }
  t.equal((await h264.evaluate(() => (window as unknown as W).viewStats())).codec, 'video/H264', 'the H.264 viewer decodes H.264');
  t.equal((await vp8a.evaluate(() => (window as unknown as W).viewStats())).codec, 'video/VP8', 'the VP8 viewer decodes VP8');
  let status = whepOf(srv.node, STREAM_ID);
  t.same(status?.viewersByCodec, { H264: 1, VP8: 1 }, 'status counts viewers per codec');
  t.equal(status?.viewers, 2);
  t.equal(status?.vp8.running, true, 'the VP8 branch runs');

  const playB = await vp8b.evaluate((url) => (window as unknown as W).play({ url, codec: 'VP8' }), srv.whepUrl);
  t.equal(playB.status, 201, 'second VP8 viewer → 201');
  const nb = await vp8b.evaluate(() => (window as unknown as W).waitFrames(15, 30_000));
  t.ok(nb >= 15, `second VP8 viewer decoded ${nb} frames`);
  t.ok((await vp8b.evaluate(() => (window as unknown as W).viewStats())).keyFramesDecoded >= 1, 'it started on a key frame');
  status = whepOf(srv.node, STREAM_ID);
  t.same(status?.viewersByCodec, { H264: 1, VP8: 2 });
  t.equal(status?.vp8.starts, 1, 'both VP8 viewers are fed by the one VP8 encoder');
  t.ok((status?.vp8.keyUnitsForced ?? 0) >= 1, `the second viewer's join forced a VP8 key frame (${status?.vp8.keyUnitsForced})`);

  // A viewer that closes its peer connection without DELETE is gone as soon as DTLS says so.
  await vp8a.evaluate(() => (window as unknown as { view: RTCPeerConnection }).view.close());
  const idA = new URL(String(playA.location)).pathname.split('/').pop() ?? '';
  for (let i = 0; i < 50 && srv.node.getSession(idA); i++) await new Promise((r) => setTimeout(r, 100));
  t.equal(srv.node.getSession(idA), undefined, 'first VP8 viewer leaves by closing its peer: its session ends without a DELETE');
  t.equal(await del(playA.location), 404, 'a DELETE afterwards finds nothing');
  t.equal(whepOf(srv.node, STREAM_ID)?.vp8.running, true, 'the branch keeps running for the remaining VP8 viewer');
  const stillB = await vp8b.evaluate(() => (window as unknown as W).waitFrames(10, 15_000));
  t.ok(stillB >= 10, `the remaining VP8 viewer keeps playing (${stillB} frames)`);

  t.equal(await del(playB.location), 200, 'last VP8 viewer leaves (DELETE → 200)');
  await vp8b.evaluate(() => (window as unknown as { view: RTCPeerConnection }).view.close());
  status = whepOf(srv.node, STREAM_ID);
  t.equal(status?.vp8.running, false, 'the VP8 encoder stopped');
  t.same(status?.viewersByCodec, { H264: 1, VP8: 0 });
  const vp8Frames = status?.vp8.framesOut ?? 0;
  const h = await h264.evaluate(() => (window as unknown as W).waitFrames(15, 15_000));
  t.ok(h >= 15, `the H.264 viewer plays on (${h} frames)`);
  t.equal(whepOf(srv.node, STREAM_ID)?.vp8.framesOut, vp8Frames, 'no VP8 frames are encoded while nobody watches VP8');
});

t.test("a VP8 viewer's PLI forces a key frame on the VP8 encoder only (werift viewer)", { timeout: 60_000 }, async (t) => {
  // Key frames only on request (no GOP, no HLS segment IDRs), so each one is ours to explain.
  const srv = await startMediaServer(t, { params: { width: 128, height: 128, ...NONE }, settings: { vp8KeyIntFrames: 3000, keyIntFrames: 3000, hlsEnabled: false } });
  const started = new Promise<void>((resolve) => srv.node.once('started', () => resolve()));
  t.equal((await wrtcPublish(t, srv.whipUrl, [40, 160, 220])).status, 201);
  await started;

  const vp8 = new RTCRtpCodecParameters({ mimeType: 'video/VP8', clockRate: 90000, rtcpFeedback: [{ type: 'nack' }, { type: 'nack', parameter: 'pli' }] });
  const pc = new RTCPeerConnection({ codecs: { video: [vp8], audio: [] }, iceAdditionalHostAddresses: ['127.0.0.1'], iceUseIpv6: false });
  t.teardown(() => pc.close());
  const receiver = pc.addTransceiver('video', { direction: 'recvonly' }).receiver;
  let keyframes = 0;
  let sinceKeyframe = 0;
  let ssrc = 0;
  const waiters = new Set<() => void>();
  pc.onTrack.subscribe((track) =>
    track.onReceiveRtp.subscribe((rtp: RtpPacket) => {
      ssrc = rtp.header.ssrc;
      if (startsVp8Keyframe(rtp.payload)) {
        keyframes++;
        sinceKeyframe = 0;
      } else if (rtp.header.marker) {
        sinceKeyframe++;
      }
      for (const fn of [...waiters]) fn();
    }),
  );
  /** Resolves once `pred` holds after a received packet; rejects after 10 s. */
  const packetsUntil = (what: string, pred: () => boolean) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!pred()) return;
        waiters.delete(check);
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(new Error(`timed out waiting for ${what}`));
      }, 10_000);
      waiters.add(check);
    });
  await pc.setLocalDescription(await pc.createOffer());
  if (pc.iceGatheringState !== 'complete') await pc.iceGatheringStateChange.watch((s) => s === 'complete', 5000);
  const res = await fetch(srv.whepUrl, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: pc.localDescription?.sdp });
  t.equal(res.status, 201, 'werift VP8-only viewer → 201');
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  await packetsUntil('the first key frame', () => keyframes >= 1);
  t.equal(keyframes, 1, 'the viewer starts on a key frame');
  // Let the join's forced key frame (if it was not the first) and its rate-limit window pass:
  // 20 inter frames in a row (≈ 0.7 s at 30 fps) leave no key frame in flight.
  await packetsUntil('20 inter frames in a row', () => sinceKeyframe >= 20);

  const before = whepOf(srv.node, STREAM_ID);
  const forcedBefore = before?.vp8.keyUnitsForced ?? 0;
  const h264Before = srv.node.status(STREAM_ID)?.keyUnitsForced ?? 0;
  const keyframesBefore = keyframes;
  await receiver.sendRtcpPLI(ssrc);
  await packetsUntil('a key frame after the PLI', () => keyframes > keyframesBefore);
  const after = whepOf(srv.node, STREAM_ID);
  t.equal(after?.vp8.keyUnitsForced, forcedBefore + 1, 'PLI → one key unit forced on the VP8 encoder, and its key frame reached the viewer');
  t.equal(srv.node.status(STREAM_ID)?.keyUnitsForced, h264Before, 'the H.264 encoder was not asked');
  t.equal(after?.vp8.starts, 1, 'the same VP8 encoder');
});

/**
 * A Chromium WHEP viewer of a live stream on an impaired link, beside a direct Chromium-to-Chromium
 * pair on a link with the same impairment, in one lab (netns.ts): what a browser-to-browser call
 * does on that link is the anchor the viewer is compared with. Used by the network bench and the
 * viewer tests of test/network.
 *
 *   srv  ── clean veth ── pub     a `reverie serve` and an OBS-like publisher (stamped H.264, 512², 30 fps)
 *   srv  ══ impaired ════ view    Chromium playing the stream's WHEP output
 *   psend ═ impaired ════ precv   Chromium sending the same stamped pictures as its camera (H.264, 512²,
 *                                 30 fps, ≤ 1.5 Mb/s, libwebrtc's NACK/RTX/FEC and congestion control)
 *                                 to Chromium receiving it
 *
 * Each impaired link is its own (same settings, own rate limit and queue), so the two never compete
 * for a thin link. `down` is toward the receivers (ab of both links), `up` back toward the senders.
 * With `{ publisherLink: 'impaired' }` the publisher's link is an impaired one too (ab: publisher →
 * node), and `impair(…, 'publisher')` impairs it instead of the viewer's: the viewer then shows what
 * the node made of a publisher on a bad link, beside the pair on the same kind of link.
 *
 *   const lab = await startViewerLab(t, 30);
 *   await lab.impair({ delayMs: 40, jitterMs: 10, lossPercent: 3 });   // 80 ms RTT, both directions
 *   const before = await lab.stats(); …; const after = await lab.stats();
 */
import { execFile } from 'node:child_process';
import { existsSync, renameSync } from 'node:fs';
import { promisify } from 'node:util';
import type { BrowserContext, Page } from 'playwright-core';
import { launchChromium } from './chromium.ts';
import { stampedH264 } from './h264Source.ts';
import type { ImpairedLink, Impairment } from './impairedLink.ts';
import { createLab } from './netns.ts';
import { startObsPublishers } from './obsPublisher.ts';
import { startServerProcess, type ServerProcess } from './serverProcess.ts';
import { until } from './until.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** A receiver's inbound video counters (Chromium's RTCInboundRtpStreamStats), cumulative. */
export interface ReceiverStats {
  framesDecoded: number;
  /** Freezes: a frame later than max(3 × the mean frame interval, the mean + 150 ms). */
  freezeCount: number;
  /** Seconds spent frozen. */
  totalFreezesDuration: number;
  /** NACK and PLI packets the receiver sent. */
  nackCount: number;
  pliCount: number;
  packetsReceived: number;
  packetsLost: number;
  bytesReceived: number;
  /** Seconds, summed over emitted frames (divide by jitterBufferEmittedCount for the mean). */
  jitterBufferDelay: number;
  jitterBufferEmittedCount: number;
  frameWidth: number;
  frameHeight: number;
}

export interface ViewerLab {
  server: ServerProcess;
  /** The stream the publisher sends and the viewer plays. */
  streamId: string;
  /** srv → view (ab) and back (ba). */
  viewerLink: ImpairedLink;
  /** pub → srv (ab) and back (ba), with `publisherLink: 'impaired'`; else null (a clean veth). */
  publisherLink: ImpairedLink | null;
  /** psend → precv (ab) and back (ba). */
  pairLink: ImpairedLink;
  /**
   * Sets the pair's link and the viewer's (or, with `side` 'publisher', the publisher's) the same:
   * `both` each way, then `down` (away from the sender: toward the receiver, or the node) and `up` on top.
   */
  impair(both: Impairment, down?: Impairment, up?: Impairment, side?: 'viewer' | 'publisher'): Promise<void>;
  /** The viewer's and the pair receiver's counters now. */
  stats(): Promise<{ viewer: ReceiverStats; pair: ReceiverStats }>;
  /** `seconds` + 1 readings of both, 1 s apart on the wall clock (however long a reading takes). */
  measure(seconds: number, onSecond?: () => void): Promise<{ viewer: ReceiverStats[]; pair: ReceiverStats[] }>;
}

const GATHERED = `async function gathered(pc) {
  if (pc.iceGatheringState === 'complete') return;
  await new Promise((resolve) => {
    pc.addEventListener('icegatheringstatechange', () => { if (pc.iceGatheringState === 'complete') resolve(); });
    setTimeout(resolve, 2000);
  });
}`;

export const RECEIVER_PAGE = `<!doctype html><html><body><video id="v" autoplay muted playsinline></video><script>
${GATHERED}
function show(pc) {
  const v = document.getElementById('v');
  pc.ontrack = (e) => { if (e.track.kind === 'video') { v.srcObject = new MediaStream([e.track]); v.play().catch(() => {}); } };
}
window.whep = async (url) => {
  const pc = new RTCPeerConnection(); window.pc = pc; show(pc);
  pc.addTransceiver('video', { direction: 'recvonly' });
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  const body = await res.text();
  if (res.status === 201) await pc.setRemoteDescription({ type: 'answer', sdp: body });
  return { status: res.status, body };
};
window.answer = async (offer) => {
  const pc = new RTCPeerConnection(); window.pc = pc; show(pc);
  await pc.setRemoteDescription({ type: 'offer', sdp: offer });
  await pc.setLocalDescription(await pc.createAnswer()); await gathered(pc);
  return pc.localDescription.sdp;
};
window.inbound = async () => {
  let out = null;
  (await window.pc.getStats()).forEach((s) => {
    if (s.type !== 'inbound-rtp' || s.kind !== 'video') return;
    out = { framesDecoded: s.framesDecoded ?? 0, freezeCount: s.freezeCount ?? 0, totalFreezesDuration: s.totalFreezesDuration ?? 0,
      nackCount: s.nackCount ?? 0, pliCount: s.pliCount ?? 0, packetsReceived: s.packetsReceived ?? 0, packetsLost: s.packetsLost ?? 0,
      bytesReceived: s.bytesReceived ?? 0, jitterBufferDelay: s.jitterBufferDelay ?? 0, jitterBufferEmittedCount: s.jitterBufferEmittedCount ?? 0,
      frameWidth: s.frameWidth ?? 0, frameHeight: s.frameHeight ?? 0 };
  });
  return out;
};
</script></body></html>`;

// localhost: a secure context, so getUserMedia works.
const SENDER_PAGE = `<!doctype html><html><body><script>
${GATHERED}
window.offer = async ({ size, kbps }) => {
  const media = await navigator.mediaDevices.getUserMedia({ video: { width: size, height: size, frameRate: 30 } });
  const pc = new RTCPeerConnection(); window.pc = pc;
  const tr = pc.addTransceiver(media.getVideoTracks()[0], { direction: 'sendonly', sendEncodings: [{ maxBitrate: kbps * 1000 }] });
  // H.264 as our node sends, with everything libwebrtc repairs loss with (RTX, RED, ULPFEC, FlexFEC).
  const keep = (c) => (c.mimeType === 'video/H264' && /packetization-mode=1/.test(c.sdpFmtpLine || '')) || /^video\\/(rtx|red|ulpfec|flexfec)/.test(c.mimeType);
  tr.setCodecPreferences(RTCRtpSender.getCapabilities('video').codecs.filter(keep));
  await pc.setLocalDescription(await pc.createOffer()); await gathered(pc);
  return pc.localDescription.sdp;
};
window.accept = (sdp) => window.pc.setRemoteDescription({ type: 'answer', sdp });
</script></body></html>`;

const exec = promisify(execFile);

/** The publisher's stamped H.264 decoded to Y4M (cached beside it): the pair's camera shows the same pictures. */
async function asY4m(h264: string): Promise<string> {
  const y4m = h264.replace(/\.h264$/, '.y4m');
  if (existsSync(y4m)) return y4m;
  const partial = `${y4m}.${process.pid}.part`;
  await exec('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-y', '-framerate', '30', '-f', 'h264', '-i', h264, '-pix_fmt', 'yuv420p', '-f', 'yuv4mpegpipe', partial]);
  renameSync(partial, y4m);
  return y4m;
}

export async function openPage(ctx: BrowserContext, url: string, html: string): Promise<Page> {
  const page = await ctx.newPage();
  await page.route(url, (route) => route.fulfill({ contentType: 'text/html', body: html }));
  await page.goto(url);
  return page;
}

/** Builds the lab `id` (netns.ts), starts everything with clean links and waits until both receivers decode. */
export interface ViewerLabOptions {
  /** The publisher's link to the node: a clean veth (default) or an impaired link, clean until `impair(…, 'publisher')`. */
  publisherLink?: 'clean' | 'impaired';
}

export async function startViewerLab(t: Teardown, id: number, opts: ViewerLabOptions = {}): Promise<ViewerLab> {
  const lab = await createLab(t, id, ['srv', 'pub', 'view', 'psend', 'precv']);
  await lab.link({ ns: null, addr: lab.ip(0, 1) }, { ns: 'srv', addr: lab.ip(0, 2) }); // the test's API calls
  const publisherLink = opts.publisherLink === 'impaired' ? await lab.impairedLink({ ns: 'pub', addr: lab.ip(1, 2) }, { ns: 'srv', addr: lab.ip(1, 1) }, {}, id * 3 + 2) : null;
  if (!publisherLink) await lab.link({ ns: 'srv', addr: lab.ip(1, 1) }, { ns: 'pub', addr: lab.ip(1, 2) });
  const viewerLink = await lab.impairedLink({ ns: 'srv', addr: lab.ip(2, 1) }, { ns: 'view', addr: lab.ip(2, 2) }, {}, id * 3);
  const pairLink = await lab.impairedLink({ ns: 'psend', addr: lab.ip(3, 1) }, { ns: 'precv', addr: lab.ip(3, 2) }, {}, id * 3 + 1);
  await lab.run('pub', ['ip', 'route', 'add', 'default', 'via', lab.ip(1, 1, false)]);
  await lab.run('view', ['ip', 'route', 'add', 'default', 'via', lab.ip(2, 1, false)]);
  await lab.routeFromHere(lab.ip(0, 2, false));

  // The node is known by its address on the viewer's link: the viewer's HTTP and media cross it;
  // the publisher's and the test's reach the same address over their clean veths.
  const node = lab.ip(2, 1, false);
  const server = await startServerProcess(t, { lab, ns: 'srv', env: { HOST: '0.0.0.0', PORT: '8080', PUBLIC_URL: `http://${node}:8080`, WEBRTC_INTERFACES: node } });
  const created = await server.api('POST', '/v1/streams', { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'network lab', skip_diffusion: true } });
  if (created.status !== 201) throw new Error(`stream not created: ${created.status} ${JSON.stringify(created.body)}`);
  const stream = created.body as { id: string; whip_url: string; stream_key: string; output_stream_url: string };
  const pubs = startObsPublishers(t, { netns: lab.ns('pub') });
  // 150 pictures: a 5 s loop (the pair's Y4M camera file is ≈ 59 MB).
  const source = await stampedH264({ size: 512, frames: 150 });
  const p = await pubs.publish({ url: stream.whip_url, token: stream.stream_key, source });
  if (p.status !== 201) throw new Error(`WHIP answered ${p.status}: ${p.body}`);
  await pubs.waitState(p.id, 'connected', 20_000);

  const [viewCtx, sendCtx, recvCtx] = await Promise.all([
    launchChromium(t, { fakeMedia: false, netns: lab.ns('view') }),
    // The fake camera plays the publisher's pictures at 30 fps (its own animation runs at 20).
    launchChromium(t, { netns: lab.ns('psend'), fakeVideoFile: await asY4m(source) }),
    launchChromium(t, { fakeMedia: false, netns: lab.ns('precv') }),
  ]);
  const viewer = await openPage(viewCtx, 'http://viewer.test/recv.html', RECEIVER_PAGE);
  const played = await viewer.evaluate((url) => (window as unknown as { whep(u: string): Promise<{ status: number; body: string }> }).whep(url), stream.output_stream_url);
  if (played.status !== 201) throw new Error(`WHEP answered ${played.status}: ${played.body}`);

  const sender = await openPage(sendCtx, 'http://localhost:9/send.html', SENDER_PAGE);
  const receiver = await openPage(recvCtx, 'http://viewer.test/recv.html', RECEIVER_PAGE);
  const offer = await sender.evaluate((o) => (window as unknown as { offer(o: { size: number; kbps: number }): Promise<string> }).offer(o), { size: 512, kbps: 1500 });
  const answer = await receiver.evaluate((sdp) => (window as unknown as { answer(s: string): Promise<string> }).answer(sdp), offer);
  await sender.evaluate((sdp) => (window as unknown as { accept(s: string): Promise<void> }).accept(sdp), answer);

  const inbound = (page: Page) => page.evaluate(() => (window as unknown as { inbound(): Promise<ReceiverStats | null> }).inbound());
  const stats = async () => {
    const [v, r] = await Promise.all([inbound(viewer), inbound(receiver)]);
    if (!v || !r) throw new Error(`no inbound video yet [viewer:${v !== null}] [pair:${r !== null}]`);
    return { viewer: v, pair: r };
  };
  await until('both receivers decode', () => stats().catch(() => null), (s) => (s?.viewer.framesDecoded ?? 0) >= 30 && (s?.pair.framesDecoded ?? 0) >= 30, 30_000, 250);

  return {
    server,
    streamId: stream.id,
    viewerLink,
    publisherLink,
    pairLink,
    async impair(both, down = {}, up = {}, side = 'viewer') {
      if (side === 'publisher' && !publisherLink) throw new Error("impair(…, 'publisher') needs startViewerLab(t, id, { publisherLink: 'impaired' })");
      for (const link of [side === 'viewer' ? viewerLink : (publisherLink as ImpairedLink), pairLink]) {
        await link.set('both', both);
        await link.set('ab', down);
        await link.set('ba', up);
      }
    },
    stats,
    async measure(seconds, onSecond) {
      const out = { viewer: [] as ReceiverStats[], pair: [] as ReceiverStats[] };
      const start = performance.now();
      for (let i = 0; i <= seconds; i++) {
        await new Promise((r) => setTimeout(r, Math.max(0, start + i * 1000 - performance.now())));
        const s = await stats();
        out.viewer.push(s.viewer);
        out.pair.push(s.pair);
        if (i > 0) onSecond?.();
      }
      return out;
    },
  };
}

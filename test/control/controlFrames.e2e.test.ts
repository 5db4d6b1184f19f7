/**
 * What the control channel says about frames, checked against what a viewer sees, end to end:
 * the real server with the demo models on CPU (api + media node running diffusion), an OBS-like
 * WHIP publisher sending one still picture over and over (so only params can change the output),
 * a real WHEP viewer in headless Chromium reading every decoded frame's pixels and RTP timestamp
 * (MediaStreamTrackProcessor: VideoFrame.metadata().rtpTimestamp), and the control WebSocket.
 *
 * - A prompt change sent over the socket is acknowledged with a frame (number, capture time and
 *   the RTP timestamp viewers receive it with); the first frame the viewer sees changed in the
 *   pixels is that frame.
 * - A transition over 10 frames changes the output gradually: over the frames between its ack and
 *   its `transition_done`, the mean distance to the final picture falls step by step.
 */
import t from 'tap';
import { launchChromium } from '../helpers/chromium.ts';
import { openControl } from '../helpers/controlClient.ts';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startLiveServer } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';

/** A presented frame: its RTP timestamp and a 96×96 luma thumbnail, as the page recorded them. */
interface Seen {
  rtp: number;
  px: number[];
}

/** Mean absolute luma difference (0–255) of two thumbnails. */
function dist(a: number[], b: number[]): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += Math.abs((a[i] ?? 0) - (b[i] ?? 0));
  return s / a.length;
}

/** Frames before the acked one that must be unchanged (the still picture the change starts from). */
const RECENT = 6;

/** RTP timestamps wrap at 2^32; the stream's start close to 0 never gets there in a test. */
const before = (x: number, y: number) => x < y;

// Why the demo models show here at all: their random cross-attention only moves fine, noise-like
// detail, which the viewer's H.264 and the 96 px thumbnail average away (≈0.5 luma levels, under
// the encoder noise). The demo UNet also turns the prompt's words into a frame-wide brightness and
// the seed's noise into large blobs (native/tiny/TinyModelBuilder.ts), which survive both: the
// same model and engine path a stream always runs, nothing here is special-cased.
t.test('the acked frame is the first changed frame a viewer sees; a 10-frame transition is gradual in the pixels', { timeout: 420_000 }, async (t) => {
  // No slate: when the frame path stalls for 0.5 s (a loaded machine), the outputs show the grey
  // slate for a moment (docs/decisions/0011), and a viewer's grey frames just before the ack (68
  // levels off, seen in CI) are not what this test is about.
  const { server, api, key } = await startLiveServer(t, { env: { ROLES: 'api,media' }, mediaSettings: { slateAfterMs: 600_000, slateBusyMs: 600_000 } });
  const A = 'a quiet lake';
  const B = 'a burning city';
  const created = await api('POST', '/v1/streams', { params: { prompt: A, width: 384, height: 384, t_index_list: [5], seed: 42 } });
  t.equal(created.status, 201, 'stream created');
  const id = created.body['id'] as string;

  const pubs = startObsPublishers(t);
  // A still camera: every input frame is the same, so the output only changes with the params.
  const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source: await stampedH264({ size: 256, frames: 300, still: true }) });
  t.equal(pub.status, 201, 'publisher live');

  const c = await openControl(t, `${server.url.replace('http', 'ws')}/v1/streams/${id}/control`, { authorization: `Bearer ${key}` });
  await c.next((m) => m.type === 'hello');
  const live = await c.next((m) => m.type === 'stats' && m.output_fps > 2, 120_000);
  t.comment(`output ${live.output_fps.toFixed(1)} fps on the demo models`);

  const ctx = await launchChromium(t);
  const page = await ctx.newPage();
  await page.goto(`${server.url}/web/index.html`);
  const whep = created.body['output_stream_url'] as string;
  // Plain JavaScript (a string): the test's TypeScript transform would add helpers the page lacks.
  await page.evaluate(`(async (url) => {
    window.seen = [];
    const pc = new RTCPeerConnection();
    pc.addTransceiver('video', { direction: 'recvonly' });
    const canvas = document.createElement('canvas');
    canvas.width = canvas.height = 96;
    const g = canvas.getContext('2d', { willReadFrequently: true });
    window.noRtp = 0;
    // Every decoded frame as a VideoFrame (insertable streams): its pixels and its own RTP
    // timestamp travel together. (A <video> with requestVideoFrameCallback drew whatever frame the
    // element held when a late callback ran: under load the next one, which paired a frame's
    // pixels with the previous frame's timestamp.)
    // maxBufferSize: the processor holds one frame by default and drops the older one when the
    // next arrives before this loop read it (drawing and reading back pixels takes longer than a
    // frame interval on a loaded machine), so a transition's steps went missing here, not at the
    // node. 60 frames is 10 s of this stream; discardedFrames counts what it still dropped.
    const read = async (track) => {
      const processor = new MediaStreamTrackProcessor({ track, maxBufferSize: 60 });
      window.processor = processor;
      const reader = processor.readable.getReader();
      for (;;) {
        const { value: frame, done } = await reader.read();
        if (done) return;
        const rtp = frame.metadata().rtpTimestamp;
        g.drawImage(frame, 0, 0, 96, 96);
        frame.close();
        const rgba = g.getImageData(0, 0, 96, 96).data;
        const luma = new Array(96 * 96);
        for (let i = 0; i < luma.length; i++) luma[i] = Math.round(0.299 * rgba[4 * i] + 0.587 * rgba[4 * i + 1] + 0.114 * rgba[4 * i + 2]);
        if (typeof rtp === 'number') window.seen.push({ rtp, px: luma });
        else window.noRtp++;
      }
    };
    pc.ontrack = (e) => void read(e.track);
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise((resolve) => {
      if (pc.iceGatheringState === 'complete') return resolve();
      pc.addEventListener('icegatheringstatechange', () => pc.iceGatheringState === 'complete' && resolve());
    });
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: pc.localDescription.sdp });
    await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
    window.pc = pc;
  })(${JSON.stringify(whep)})`);
  const frames = async (): Promise<Seen[]> => (await page.evaluate('window.seen.splice(0)')) as Seen[];
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  const waitFrames = async (n: number, timeoutMs: number, fromRtp = -1) => {
    await page.waitForFunction(`window.seen.filter((f) => f.rtp >= ${fromRtp}).length >= ${n}`, undefined, { timeout: timeoutMs, polling: 100 }).catch(async (err: unknown) => {
      const diag = await page.evaluate('({ seen: window.seen.length, last: window.seen.at(-1)?.rtp, pc: window.pc?.connectionState, noRtp: window.noRtp, discarded: window.processor?.discardedFrames })');
      const stats = c.all.filter((m) => m['type'] === 'stats').slice(-3);
      throw new Error(`${String(err)}: waiting for ${n} frames from rtp ${fromRtp}; page ${JSON.stringify(diag)}; errors ${pageErrors.join(' | ')}; stats ${JSON.stringify(stats)}`);
    });
  };
  await waitFrames(20, 60_000);
  t.pass('the viewer presents frames with their RTP timestamps');

  // Warm the prompt cache (a prompt never seen is encoded in the background first, see below).
  for (const [i, p] of [B, A].entries()) {
    c.send({ type: 'update', id: `warm${i}`, params: { prompt: p } });
    await c.next((m) => m.id === `warm${i}` && (m.type === 'ack' || m.type === 'error'), 30_000);
    await frames();
    await waitFrames(Math.max(10, Math.round(live.output_fps * 3)), 60_000);
  }
  await frames();
  await waitFrames(8, 30_000);

  // 1. A prompt change: the acked frame against the first changed frame seen. The ack names the
  // access unit of the first frame processed with the change (each access unit carries its frame's
  // PTS, so frames the encoder dropped cannot shift the numbering); a cached prompt applies on it.
  await t.test('the acked frame is the first changed frame the viewer sees', async (t) => {
    c.send({ type: 'update', id: 'cut', params: { prompt: B } });
    const ack = await c.next((m) => m.id === 'cut' && m.type === 'ack', 30_000);
    t.equal(ack.mode, 'hot');
    t.type(ack.frame, 'number', `acked frame ${ack.frame}`);
    t.type(ack.rtp_timestamp, 'number', 'with the RTP timestamp viewers get it with');
    t.ok(typeof ack.frame_at === 'number' && ack.frame_at >= ack.applied_at - 1000, 'and its capture time');
    await waitFrames(8, 60_000, ack.rtp_timestamp);
    const cut = await frames();
    // The frames right before the acked one: the page may also hold older ones (its reader runs
    // behind on a loaded machine and catches up; a lost packet shows concealed pictures until the
    // next key frame), which are not what "the frame before" means.
    const old = cut.filter((f) => before(f.rtp, ack.rtp_timestamp)).slice(-RECENT);
    const neu = cut.filter((f) => !before(f.rtp, ack.rtp_timestamp));
    t.ok(old.length >= 3 && neu.length >= 3, `frames seen before (${old.length}) and from (${neu.length}) the acked one`);
    const ref = old[old.length - 1]!.px;
    t.comment(`frames around the ack (RTP − acked, in 90 kHz ticks: distance to the last frame before it): ${cut.map((f) => `${f.rtp - ack.rtp_timestamp}: ${dist(f.px, ref).toFixed(1)}`).join(', ')}`);
    // Noise floor: frame-to-frame differences of the still output before the change (encoder noise).
    const floor = Math.max(...old.slice(0, -1).map((f) => dist(f.px, ref)), 0);
    const final = neu[neu.length - 1]!.px;
    const jump = dist(final, ref);
    t.ok(jump > 3 * floor + 0.5, `the prompt changes the picture (distance ${jump.toFixed(1)} vs noise ${floor.toFixed(2)})`);
    const threshold = Math.max(1.5 * floor + 0.2, jump / 3);
    const firstChanged = [...old, ...neu].find((f) => dist(f.px, ref) > threshold);
    t.ok(firstChanged, 'the viewer sees the change');
    const acked = cut.find((f) => f.rtp === ack.rtp_timestamp);
    t.comment(`acked frame ${ack.frame} rtp ${ack.rtp_timestamp}: ${acked ? 'presented' : 'not presented by the viewer'}; first changed seen rtp ${firstChanged?.rtp}`);
    // The first frame the viewer presented from the ack on. It is the acked one unless two frames
    // reached the node in one burst (ms apart): the page's renderer then shows only the second
    // (seen once on a loaded CI machine: the next frame 7.9 ms later). Frames are ≈ 166 ms apart.
    const firstFrom = neu[0];
    t.ok(firstFrom && ((firstFrom.rtp - ack.rtp_timestamp) >>> 0) < 90 * 50, `the viewer presents the acked frame or one that came with it (${firstFrom ? (((firstFrom.rtp - ack.rtp_timestamp) >>> 0) / 90).toFixed(1) : '–'} ms after it)`);
    t.equal(firstChanged?.rtp, firstFrom?.rtp, 'the first changed frame the viewer sees is the first it presented from the acked one on');
    t.ok(
      old.every((f) => dist(f.px, ref) <= threshold),
      'no frame before the acked one is changed',
    );
  });

  // 2. Transitions over 10 frames: gradual in the pixels. The seed (the demo model's strongest
  // lever: its noise is most of the picture) and the prompt (a weaker one on the demo weights).
  for (const [what, params] of [['seed', { seed: 7 }], ['prompt', { prompt: A }]] as const) {
  await frames();
  await waitFrames(6, 60_000);
  c.send({ type: 'update', id: `fade-${what}`, params, transition: { steps: 10, method: 'linear' } });
  const fade = await c.next((m) => m.id === `fade-${what}` && m.type === 'ack', 30_000);
  const done = await c.next((m) => m.id === `fade-${what}` && m.type === 'transition_done', 60_000);
  // One step per processed frame: 10 consecutive output frames, fewer when the encoder, behind on
  // a loaded machine, skipped some (a skipped frame gets no number).
  t.ok(done.frame - fade.frame <= 9 && done.frame - fade.frame >= 4, `10 steps on at most 10 consecutive output frames (${fade.frame}…${done.frame})`);
  await waitFrames(8, 60_000, done.rtp_timestamp);
  const tr = await frames();
  const endPx = tr[tr.length - 1]!.px;
  // The frames right before it (older ones the page may still hold are not "before", see above).
  const pre = tr.filter((f) => before(f.rtp, fade.rtp_timestamp)).slice(-RECENT);
  t.ok(pre.length >= 3, `frames seen before the transition (${pre.length})`);
  const startPx = pre.at(-1)!.px;
  // Noise floor: how far the still picture before the transition wanders from frame to frame
  // (encoder noise): the median, so one odd picture does not set it (seen once in CI: one frame 34
  // levels off, the frames around it within 0.5).
  const spread = pre.slice(0, -1).map((f) => dist(f.px, startPx)).sort((a, b) => a - b);
  const floor = spread[Math.floor(spread.length / 2)] ?? 0;
  t.comment(`before the transition (RTP − its ack: distance to the last one): ${pre.map((f) => `${f.rtp - fade.rtp_timestamp}: ${dist(f.px, startPx).toFixed(1)}`).join(', ')}`);
  const steps = tr.filter((f) => !before(f.rtp, fade.rtp_timestamp) && !before(done.rtp_timestamp, f.rtp));
  const d = steps.map((f) => dist(f.px, endPx));
  const total = dist(startPx, endPx);
  t.comment(`${what}: distance to the final picture: start ${total.toFixed(1)}; steps seen (${steps.length}/10): ${d.map((x) => x.toFixed(1)).join(', ')}`);
  const discarded = (await page.evaluate('window.processor?.discardedFrames ?? null')) as number | null;
  t.ok(steps.length >= 5, `the viewer saw most of the steps (${steps.length}; frames the page's reader dropped so far: ${discarded ?? 'not counted by this browser'})`);
  // Monotonic: each step no farther from the final picture than the one before, within the noise floor.
  const tol = 2 * floor + 0.5;
  t.ok(total > 3 * tol, `the change is well above the noise (${total.toFixed(1)} vs floor ${floor.toFixed(2)})`);
  t.ok(
    d.every((x, i) => i === 0 || x <= d[i - 1]! + tol),
    `the distance to the final picture falls step by step (tolerance ${tol.toFixed(2)})`,
  );
  // The first step is 1/10 of the blend: for a seed (noise blended with its norm kept) that moves
  // the picture only ≈6 % of the way, within the noise, so only "not all of it" is checked here.
  t.ok(d[0]! > 0.1 * total, `the first step does not jump to the end (${d[0]!.toFixed(1)} of ${total.toFixed(1)} left)`);
  // Within one step (1/10) of the end: after a large change the encoder refines the picture over
  // the next P-frames (measured: the done frame still 3–3.5 levels from the picture 8 frames on,
  // against a still-picture floor of ≈0.5), so the floor is not the bound here.
  t.ok(d[d.length - 1]! <= 0.1 * total + tol, `the last step is the final picture, within one step and the noise (${d[d.length - 1]!.toFixed(1)} ≤ ${(0.1 * total + tol).toFixed(1)})`);
  const between = d.filter((x) => x > 0.1 * total && x < 0.9 * total).length;
  t.ok(between >= 3, `gradual: ${between} steps strictly between start and end (a cut would show none)`);
  }

  await pubs.stop(pub.id);
});

/**
 * The switch from the slate to live (SlateSwitch, decision 0011) as a viewer sees it: a WHEP viewer
 * (Chromium) joins before the publisher and watches the slate; an OBS-like publisher starts; the
 * viewer's frames must go on through the switch without a freeze. The slate runs at the output
 * rate here, so the output has one frame interval (33 ms) on both sides of the switch and a stall
 * at the switch stands out from the slate's own cadence.
 *
 * This file holds one test on purpose: the freeze it guards against came from work done the first
 * time in a process (GStreamer loading libav's plugin inside the first publisher's decoder build,
 * on the JS thread), which any earlier stream in the same process would have paid already.
 */
import t from 'tap';
import { launchChromium } from '../../helpers/chromium.ts';
import { stampedH264 } from '../../helpers/h264Source.ts';
import { startObsPublishers } from '../../helpers/obsPublisher.ts';
import { until } from '../../helpers/until.ts';
import { STREAM_ID, STREAM_KEY, startMediaServer, type PeerPage } from '../harness.ts';

type W = Window & PeerPage;

const OUTPUT_FPS = 30;
const INTERVAL_MS = 1000 / OUTPUT_FPS;
/**
 * Allowed on top of 2 frame intervals, ms. This test guards against the freeze (0.74–1.36 s; 1056
 * and 1178 ms here before the fix), not the exact switch time, which is a measurement and lives in
 * `npm run bench -- slate --part switch` (docs/performance.md). The suite runs this beside another
 * test file on 2 cores, where the gap also holds scheduling noise: quiet it measured 49–87 ms; with
 * another heavy file beside it once 190 ms (a 191 ms gap among slate frames while the publisher's
 * DTLS ran, and 138 ms at the switch); at load 12–22, 64–348 ms (median ≈ 130 ms). 150 ms keeps
 * the bound far below any freeze, and a failure prints the node's log (its builds and the switch,
 * with times) to read before blaming the switch.
 */
const JITTER_MS = 150;
/** Frames on each side of the first live frame whose gaps count as "across the switch". */
const AROUND = 5;

t.test('a viewer waiting on the slate sees no freeze when the stream first goes live', { timeout: 120_000 }, async (t) => {
  const node: string[] = [];
  const srv = await startMediaServer(t, {
    // The viewer makes the stream at the default size (512²); the publisher's params are 256².
    params: { width: 256, height: 256 },
    settings: { outputFps: OUTPUT_FPS, slateFps: OUTPUT_FPS },
    // The node's switch, decoder and encoder builds, to read a failure against.
    onLog: (l) => {
      const { msg = '', time } = JSON.parse(l) as { msg?: string; time: number };
      if (/^(slateTick|endSlate|EncoderBin|DecoderBin|started|loadCodecPlugins)\(\)/.test(msg)) node.push(`${time} ms: ${msg}`);
    },
  });
  const ctx = await launchChromium(t, { fakeMedia: false });
  const viewer = await ctx.newPage();
  await viewer.goto(`${srv.baseUrl}/peer.html`);
  await viewer.evaluate(() => (window as unknown as W).trackFrames());
  const played = await viewer.evaluate((url) => (window as unknown as W).play({ url }), srv.whepUrl);
  t.equal(played.status, 201, 'the viewer joins before the publisher');
  t.ok((await viewer.evaluate(() => (window as unknown as W).waitFrames(15, 30_000))) >= 15, 'it plays the slate');
  t.equal(srv.node.status(STREAM_ID)?.output, 'slate');

  const pubs = startObsPublishers(t);
  const p = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source: await stampedH264({ size: 256, frames: 150 }) });
  t.equal(p.status, 201, `OBS-like WHIP POST → 201 (${p.body})`);
  const log = await until(
    'the viewer plays the publisher',
    () => viewer.evaluate(() => (window as unknown as W).frameLog ?? []),
    (l) => l.filter((f) => f[1]).length >= 2 * AROUND,
    60_000,
  );
  t.equal(srv.node.status(STREAM_ID)?.state, 'live');

  const first = log.findIndex((f) => f[1]);
  t.ok(first >= AROUND, `the viewer saw the slate right before the publisher's first frame (${first} frames)`);
  const around = log.slice(first - AROUND, first + AROUND + 1);
  const gaps = around.slice(1).map((f, i) => f[0] - around[i]![0]);
  const maxGap = Math.max(...gaps);
  const limit = 2 * INTERVAL_MS + JITTER_MS;
  const ok = t.ok(maxGap < limit, `largest gap across the switch ${maxGap.toFixed(0)} ms < ${limit.toFixed(0)} ms (2 frame intervals + ${JITTER_MS} ms)`);
  if (!ok) {
    const origin = await viewer.evaluate(() => performance.timeOrigin);
    t.comment(`viewer (arrival ms, kind): ${around.map((f) => `${Math.round(origin + f[0])} ${f[1] ? 'live' : 'slate'}`).join(', ')}`);
    t.comment(`node:\n${node.join('\n')}`);
  }
});

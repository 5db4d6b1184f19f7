/**
 * A Chromium WHEP viewer on an impaired link (the field: 40 ± 10 ms each way, packets reordered by
 * the jitter, random loss), beside a direct Chromium-to-Chromium pair on a link with the same
 * impairment (test/helpers/viewerLab.ts). What is asserted is what the node does today: the viewer
 * keeps playing. How close it comes to the pair (decoded fps, freeze time) is reported in the test
 * output and measured by `npm run bench -- network`. Slow (≈ 1.5 min): a server, a publisher and
 * three Chromiums in five network namespaces.
 */
import t from 'tap';
import { canUseNetns } from '../helpers/netns.ts';
import { startViewerLab, type ReceiverStats } from '../helpers/viewerLab.ts';

if (!(await canUseNetns())) {
  t.fail('network namespaces need root with iproute2 and nftables (CI runs as root; `bash .ci/run` installs them)');
  process.exit(1);
}

const WINDOW_S = 20;
const SEGMENT_S = 5;

function figures(s: ReceiverStats[]) {
  const [a, b] = [s[0] as ReceiverStats, s[s.length - 1] as ReceiverStats];
  return { fps: (b.framesDecoded - a.framesDecoded) / (s.length - 1), frozenS: b.totalFreezesDuration - a.totalFreezesDuration, nacks: b.nackCount - a.nackCount };
}

t.test('a WHEP viewer at 10 % loss and 80 ms RTT with 10 ms jitter keeps playing (no permanent freeze)', { timeout: 240_000 }, async (t) => {
  const lab = await startViewerLab(t, 24);
  await lab.impair({ delayMs: 40, jitterMs: 10, lossPercent: 10, rateKbps: 0 });
  const before = (await lab.viewerLink.stats()).ab;
  const { viewer, pair } = await lab.measure(WINDOW_S);
  const after = (await lab.viewerLink.stats()).ab;

  const lost = (after.lost - before.lost) / Math.max(1, after.received - before.received);
  t.ok(lost > 0.07 && lost < 0.13, `the link toward the viewer lost ${(lost * 100).toFixed(1)} % of ${after.received - before.received} packets`);
  // Frames in every 5 s of the window: a broken reference picture the node never repaired would
  // leave the decoder waiting for a key frame that PLIs and NACKs did not bring.
  for (let i = 0; i + SEGMENT_S < viewer.length; i += SEGMENT_S) {
    const frames = (viewer[i + SEGMENT_S] as ReceiverStats).framesDecoded - (viewer[i] as ReceiverStats).framesDecoded;
    t.ok(frames >= 15, `the viewer decoded ${frames} frames in seconds ${i}–${i + SEGMENT_S} of the window`);
  }
  const [v, p] = [figures(viewer), figures(pair)];
  t.ok(v.nacks > 0, `the viewer asked for retransmissions (${v.nacks} NACKs)`);
  // Reported, not asserted (the targets of real-network work are not met yet).
  t.comment(`viewer: ${v.fps.toFixed(1)} fps, ${v.frozenS.toFixed(2)} s frozen in ${WINDOW_S} s; direct pair: ${p.fps.toFixed(1)} fps, ${p.frozenS.toFixed(2)} s frozen; ratio ${(v.fps / p.fps).toFixed(2)}`);
});

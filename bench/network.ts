/**
 * Our WHEP viewer on an impaired link against a direct Chromium-to-Chromium pair on a link with
 * the same impairment, in the same run (`npm run bench -- network`).
 *
 * The lab of test/helpers/viewerLab.ts: a `reverie serve` in a network namespace with an OBS-like
 * publisher on a clean link (stamped H.264, 512², 30 fps); a Chromium WHEP viewer of its output
 * across an emulated link (impairedLink.ts: delay, jitter that reorders, loss, rate limit; user
 * space, as netem is not in every kernel); a Chromium sender and receiver (fake camera, H.264 512²,
 * ≤ 1.5 Mb/s) across a second link with the same settings. For each condition both links are set,
 * both receivers get `--warmup` s to settle, then their Chromium counters are read every second
 * for `--seconds` s. Rows: decoded fps (window mean, median and 5th percentile of 1 s samples),
 * the seconds in which no frame was decoded at all (a stall Chromium's freeze counters only see
 * once a frame comes), Chromium's freezeCount and totalFreezesDuration, the NACKs and PLIs the receiver sent, packets
 * lost (net of retransmissions that came on the media SSRC: negative when duplicates outnumber the
 * losses), kb/s received, the mean jitter-buffer delay; the viewer's row also shows its fps as a
 * ratio of the pair's and its frozen seconds minus the pair's, and the node's input and output fps
 * (its stream status) at the end of the window.
 *
 * Conditions (the field: 40 ± 10 ms each way is an 80 ms round trip with 10 ms jitter):
 *   clean    no impairment
 *   loss1    40 ± 10 ms each way, 1 % loss each way
 *   loss3    … 3 % loss
 *   loss10   … 10 % loss
 *   rate600  40 ± 10 ms each way, no loss, 600 kb/s toward the receiver (64 KiB queue)
 *   rate300  … 300 kb/s
 *
 * `--side publisher` impairs the publisher's link to the node instead of the viewer's (rates then
 * limit what the publisher sends): the viewer, on a clean link, shows what the node made of it.
 *
 *   npm run bench -- network [--conditions clean,loss1,loss3,loss10,rate600,rate300] [--seconds 20] [--warmup 6] [--side viewer|publisher]
 *
 * Needs root (network namespaces), iproute2, nftables, cc and Chromium, as the network tests do.
 */
import type { Impairment } from '../test/helpers/impairedLink.ts';
import { canUseNetns } from '../test/helpers/netns.ts';
import { startViewerLab, type ReceiverStats } from '../test/helpers/viewerLab.ts';
import { percentile, printTable, progress, writeResult, type Row } from './lib.ts';

interface Condition {
  both: Impairment;
  /** On top of `both`, toward the receivers only. */
  down?: Impairment;
}

const FIELD = { delayMs: 40, jitterMs: 10 };
const CONDITIONS: Record<string, Condition> = {
  clean: { both: { delayMs: 0, jitterMs: 0, lossPercent: 0, rateKbps: 0 } },
  loss1: { both: { ...FIELD, lossPercent: 1, rateKbps: 0 } },
  loss3: { both: { ...FIELD, lossPercent: 3, rateKbps: 0 } },
  loss10: { both: { ...FIELD, lossPercent: 10, rateKbps: 0 } },
  rate600: { both: { ...FIELD, lossPercent: 0, rateKbps: 0 }, down: { rateKbps: 600 } },
  rate300: { both: { ...FIELD, lossPercent: 0, rateKbps: 0 }, down: { rateKbps: 300 } },
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Window {
  fps: number;
  fpsP50: number;
  fpsP5: number;
  /** Seconds of the window in which not one frame was decoded (a freeze Chromium counts only once a frame comes). */
  deadS: number;
  freezes: number;
  frozenS: number;
  nacks: number;
  plis: number;
  lostPct: number;
  kbps: number;
  jitterBufferMs: number;
  size: string;
}

/** What happened between two readings of one receiver, over `samples` readings 1 s apart. */
function summarise(samples: ReceiverStats[], seconds: number): Window {
  const first = samples[0] as ReceiverStats;
  const last = samples[samples.length - 1] as ReceiverStats;
  const d = <K extends keyof ReceiverStats>(k: K) => last[k] - first[k];
  const perSecond = samples.slice(1).map((s, i) => s.framesDecoded - (samples[i] as ReceiverStats).framesDecoded);
  const packets = d('packetsReceived') + d('packetsLost');
  const emitted = d('jitterBufferEmittedCount');
  return {
    fps: d('framesDecoded') / seconds,
    fpsP50: percentile(perSecond, 50),
    fpsP5: percentile(perSecond, 5),
    deadS: perSecond.filter((n) => n === 0).length,
    freezes: d('freezeCount'),
    frozenS: d('totalFreezesDuration'),
    nacks: d('nackCount'),
    plis: d('pliCount'),
    lostPct: packets > 0 ? (d('packetsLost') / packets) * 100 : 0,
    kbps: (d('bytesReceived') * 8) / seconds / 1000,
    jitterBufferMs: emitted > 0 ? (d('jitterBufferDelay') / emitted) * 1000 : Number.NaN,
    size: `${last.frameWidth}x${last.frameHeight}`,
  };
}

export default async function network(args: Map<string, string>): Promise<void> {
  const names = (args.get('conditions') ?? Object.keys(CONDITIONS).join(',')).split(',');
  const unknown = names.filter((n) => !(n in CONDITIONS));
  if (unknown.length > 0) throw new Error(`unknown conditions: ${unknown.join(', ')} (known: ${Object.keys(CONDITIONS).join(', ')})`);
  const seconds = Number(args.get('seconds') ?? 20);
  const warmup = Number(args.get('warmup') ?? 6);
  const side = args.get('side') ?? 'viewer';
  if (side !== 'viewer' && side !== 'publisher') throw new Error(`--side is viewer or publisher, not ${side}`);
  if (!(await canUseNetns())) throw new Error('the network bench needs root with iproute2 and nftables (network namespaces)');

  const cleanups: (() => unknown)[] = [];
  const t = { teardown: (fn: () => unknown) => cleanups.push(fn) };
  const rows: Row[] = [];
  const results: { condition: string; impairment: Condition; node: { inputFps: number; outputFps: number }; viewer: Window; pair: Window }[] = [];
  try {
    const lab = await startViewerLab(t, 30, { publisherLink: side === 'publisher' ? 'impaired' : 'clean' });
    const bar = progress('network', names.length * (warmup + seconds));
    for (const name of names) {
      const c = CONDITIONS[name] as Condition;
      await lab.impair(c.both, c.down ?? {}, {}, side);
      await sleep(warmup * 1000);
      bar.tick(warmup);
      const { viewer, pair } = await lab.measure(seconds, () => bar.tick());
      // The node's own view at the end of the window: is the publisher still there, at what rate?
      const status = (await lab.server.api('GET', `/v1/streams/${lab.streamId}/status`)).body as { data?: { inference_status?: { input_fps?: number; output_fps?: number } } };
      const node = { inputFps: status.data?.inference_status?.input_fps ?? Number.NaN, outputFps: status.data?.inference_status?.output_fps ?? Number.NaN };
      const v = summarise(viewer, seconds);
      const p = summarise(pair, seconds);
      results.push({ condition: name, impairment: c, node, viewer: v, pair: p });
      const row = (who: string, w: Window, extra: Row): Row => ({
        condition: name,
        receiver: who,
        fps: w.fps,
        fps_p50: w.fpsP50,
        fps_p5: w.fpsP5,
        dead_s: w.deadS,
        freezes: w.freezes,
        frozen_s: w.frozenS,
        nacks: w.nacks,
        plis: w.plis,
        lost_pct: w.lostPct,
        kbps: w.kbps,
        jb_ms: w.jitterBufferMs,
        size: w.size,
        ...extra,
      });
      // Chromium counts a freeze only when the next frame comes: with none at all, the difference means nothing.
      rows.push(row('viewer', v, { node_in_fps: node.inputFps, node_out_fps: node.outputFps, fps_vs_pair: p.fps > 0 ? v.fps / p.fps : Number.NaN, frozen_minus_pair_s: v.fps > 0 ? v.frozenS - p.frozenS : 'no frames' }));
      rows.push(row('pair', p, { node_in_fps: '', node_out_fps: '', fps_vs_pair: '', frozen_minus_pair_s: '' }));
    }
    bar.done();
    printTable(`WHEP viewer vs direct Chromium pair, the ${side}'s link impaired as the pair's, ${seconds} s windows after ${warmup} s`, rows);
    const path = writeResult('network', { side, seconds, warmup, conditions: results });
    console.log(`\nresults: ${path}`);
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
}

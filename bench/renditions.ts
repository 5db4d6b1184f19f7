/**
 * What a rendition costs (`npm run bench -- renditions`): the CPU of a stream's encoders with and
 * without its renditions, side by side in alternating windows of one run (so a drift of the shared
 * machine's load cancels out). The stream is the publisher's stamped pictures decoded once to
 * I420 (`--size`², 150 frames looped) and pushed at 30 fps into the stream's x264 encoder, and in
 * the `renditions` windows also into each rendition the node runs by default (RENDITIONS), which
 * waits for the stream encoder's unit of each frame as on a node. CPU is this process's (every
 * thread, user + system) per wall second; `idle` windows push nothing (the pacing loop's own cost).
 *
 *   npm run bench -- renditions [--size 512] [--seconds 8] [--windows 4]
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pino from 'pino';
import { EncoderBin, type EncodedAccessUnit } from '../media/gst/EncoderBin.ts';
import { DEFAULT_MEDIA_SETTINGS } from '../media/settings.ts';
import { Rendition } from '../media/stream/Rendition.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { percentile, printTable, procCpuSeconds, progress, writeResult } from './lib.ts';

const exec = promisify(execFile);
const FPS = 30;
type Mode = 'idle' | 'full' | 'renditions';

export default async function main(args: Map<string, string>): Promise<void> {
  const size = Number(args.get('size') ?? 512);
  const seconds = Number(args.get('seconds') ?? 8);
  const windows = Number(args.get('windows') ?? 4);
  const settings = DEFAULT_MEDIA_SETTINGS;
  const logger = pino({ level: 'warn' });
  const src = await stampedH264({ size, frames: 150 });
  const { stdout } = await exec('ffmpeg', ['-v', 'error', '-f', 'h264', '-i', src, '-f', 'rawvideo', '-pix_fmt', 'yuv420p', '-'], { encoding: 'buffer', maxBuffer: 1 << 30 });
  const bytes = (size * size * 3) / 2;
  const frames = Array.from({ length: Math.floor(stdout.length / bytes) }, (_, i) => stdout.subarray(i * bytes, (i + 1) * bytes));

  const order: Mode[] = [];
  for (let i = 0; i < windows; i++) order.push(...((i % 2 === 0 ? ['idle', 'full', 'renditions'] : ['renditions', 'full', 'idle']) as Mode[]));
  const cpu: Record<Mode, number[]> = { idle: [], full: [], renditions: [] };
  const out: Record<Mode, number[]> = { idle: [], full: [], renditions: [] };
  const bar = progress('renditions', order.length);
  for (const mode of order) {
    let units = 0;
    const renditions =
      mode === 'renditions'
        ? settings.renditions.map((spec) => new Rendition({ streamId: 'bench', spec, settings, logger, onAccessUnit: () => units++, onError: (m) => console.error(m) }))
        : [];
    const encoder =
      mode === 'idle'
        ? null
        : new EncoderBin({
            width: size,
            height: size,
            fps: FPS,
            bitrateKbps: settings.videoBitrateKbps,
            keyIntFrames: settings.keyIntFrames,
            keyUnitMinIntervalMs: settings.keyUnitMinIntervalMs,
            logger,
            onAccessUnit: (au: EncodedAccessUnit) => {
              units++;
              for (const r of renditions) r.streamAccessUnit(au, false);
            },
          });
    // One second to settle (encoders built, x264's look-ahead filled), then the window counts.
    const start = performance.now();
    let n = 0;
    let c0 = 0;
    let u0 = 0;
    const settleMs = 1000;
    const endMs = settleMs + seconds * 1000;
    for (;;) {
      const due = start + (n * 1000) / FPS;
      await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
      const t = performance.now() - start;
      if (t >= settleMs && c0 === 0) {
        c0 = procCpuSeconds('self');
        u0 = units;
      }
      if (t >= endMs) break;
      const ptsMs = performance.now();
      const frame = { width: size, height: size, data: frames[n % frames.length] as Buffer, ptsMs, format: 'I420' as const };
      encoder?.push(frame, ptsMs);
      for (const r of renditions) r.frame(frame, ptsMs);
      n++;
    }
    cpu[mode].push(((procCpuSeconds('self') - c0) / seconds) * 100);
    out[mode].push((units - u0) / seconds);
    encoder?.close();
    for (const r of renditions) r.close();
    bar.tick();
  }
  bar.done();

  const med = (xs: number[]) => percentile(xs, 50);
  const full = med(cpu.full) - med(cpu.idle);
  const extra = med(cpu.renditions) - med(cpu.full);
  const rows = (['idle', 'full', 'renditions'] as Mode[]).map((m) => ({
    mode: m === 'renditions' ? `full + ${settings.renditions.map((r) => `${r.name} (${r.scale}, ${r.bitrateKbps} kb/s)`).join(', ')}` : m,
    'cpu % p50': med(cpu[m]).toFixed(1),
    'cpu % p95': percentile(cpu[m], 95).toFixed(1),
    'units/s': med(out[m]).toFixed(1),
  }));
  printTable(`Encoders of one ${size}² stream at ${FPS} fps (${windows} windows of ${seconds} s each)`, rows);
  console.log(`\nfull encode: ${full.toFixed(1)} % of a core; renditions add ${extra.toFixed(1)} % (${((extra / full) * 100).toFixed(0)} % of the full encode)`);
  writeResult('renditions', { size, seconds, windows, renditions: settings.renditions, cpu, unitsPerSecond: out, fullEncodePct: full, renditionsPct: extra });
}

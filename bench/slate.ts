/**
 * The slate's cost (decision 0011): node CPU (this process: JS thread and every GStreamer thread,
 * from process.cpuUsage) of streams whose outputs are on slate, watched over LL-HLS (a playlist
 * request every 5 s keeps a stream "watched", as a player does) with no publisher. Baseline in the
 * same run: the same streams held unwatched (no slate: nothing encoded). Real MediaNode, real x264.
 *
 *   npm run bench -- slate [--streams 1,4] [--size 512] [--seconds 20]
 */
import Fastify from 'fastify';
import pino from 'pino';
import { MediaNode, registerMediaRoutes } from '../media/index.ts';
import { printTable, writeResult, type Row } from './lib.ts';

async function cpuOver(ms: number, during: () => Promise<void>): Promise<number> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await during();
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000 / (performance.now() - t0); // cores
}

export default async function slate(args: Map<string, string>): Promise<void> {
  const counts = (args.get('streams') ?? '1,4').split(',').map(Number);
  const size = Number(args.get('size') ?? 512);
  const seconds = Number(args.get('seconds') ?? 20);
  const app = Fastify({ logger: false });
  const node = new MediaNode({
    publicUrl: 'http://127.0.0.1',
    iceAddresses: ['127.0.0.1'],
    logger: pino({ level: 'silent' }),
    // The slate never builds a processor: one that is asked for fails the bench.
    createProcessor: async () => {
      throw new Error('the slate built a processor');
    },
    resolveIngest: async () => null,
    resolvePlayback: async (playbackId) => ({ streamId: `str_${playbackId}` }),
  });
  registerMediaRoutes(app, node);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as { port: number }).port;
  const rows: Row[] = [];
  try {
    for (const n of counts) {
      const ids = Array.from({ length: n }, (_, i) => `b${n}_${i}`);
      for (const id of ids) node.createStream(`str_${id}`, { width: size, height: size });
      // Baseline: held, nobody watching → no slate.
      const idle = await cpuOver(seconds * 1000, () => new Promise((r) => setTimeout(r, seconds * 1000)));
      // Slate: each stream's playlist asked every 5 s (what keeps an HLS player's stream watched).
      const ask = () => Promise.all(ids.map((id) => fetch(`http://127.0.0.1:${port}/hls/${id}/index.m3u8`).then((r) => r.arrayBuffer()).catch(() => undefined)));
      await ask();
      await new Promise((r) => setTimeout(r, 3000)); // warm-up: encoders built, first key frames out
      const timer = setInterval(() => void ask(), 5000);
      const on = await cpuOver(seconds * 1000, () => new Promise((r) => setTimeout(r, seconds * 1000)));
      clearInterval(timer);
      const frames = ids.map((id) => node.status(`str_${id}`)?.slate.framesOut ?? 0);
      const outputs = ids.map((id) => node.status(`str_${id}`)?.output);
      rows.push({
        streams: n,
        size: `${size}²`,
        'idle CPU (% core)': +(idle * 100).toFixed(2),
        'slate CPU (% core)': +(on * 100).toFixed(2),
        'slate per stream (% core)': +(((on - idle) * 100) / n).toFixed(2),
        'slate frames/s per stream': +(frames.reduce((a, b) => a + b, 0) / n / (seconds + 3)).toFixed(1),
        'all on slate': outputs.every((o) => o === 'slate'),
      });
      for (const id of ids) node.endStream(`str_${id}`);
    }
  } finally {
    node.close();
    await app.close();
  }
  printTable('slate: node CPU of slate-only streams (HLS-watched, no publisher) vs the same streams unwatched', rows);
  console.log(`wrote ${writeResult('slate', { size, seconds, rows })}`);
}

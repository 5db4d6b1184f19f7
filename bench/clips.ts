/**
 * Clips: time from `POST /v1/streams/{id}/clips` to a downloaded MP4, through the real server
 * (embedded default: API + media node) with an OBS-like publisher (libdatachannel, H.264 at
 * 30 fps) live. Side by side, the same clip re-encoded by ffmpeg/libx264 (ultrafast): what a
 * clip would cost without the segment buffer's no-re-encode cut.
 *
 *   npm run bench -- clips [--reps 3] [--size 512]
 *
 * Target (outputs issue): ≤ 2 s for a 10 s clip.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createAccountWithKey } from '../control/ApiKeys.ts';
import { loadConfig } from '../control/config.ts';
import { startServer } from '../control/Server.ts';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { startObsPublishers } from '../test/helpers/obsPublisher.ts';
import { printTable, progress, summarize, writeResult, type Row } from './lib.ts';

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

export default async function clips(args: Map<string, string>): Promise<void> {
  const reps = Number(args.get('reps') ?? 3);
  const size = Number(args.get('size') ?? 512);
  const lengths = [2, 10, 30];
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-bench-clips-'));
  const port = await freePort();
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: port, HOST: '127.0.0.1', PUBLIC_URL: `http://127.0.0.1:${port}`, LOG_LEVEL: 'silent', ROLES: 'api,media' });
  const server = await startServer(config, { logger: pino({ level: 'silent' }) });
  const teardowns: (() => unknown)[] = [];
  try {
    const { key } = await createAccountWithKey(server.store, 'internal');
    const auth = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const created = (await (await fetch(`${server.url}/v1/streams`, { method: 'POST', headers: auth, body: JSON.stringify({ params: { prompt: 'bench', width: size, height: size, skip_diffusion: true } }) })).json()) as Record<string, string>;
    const pubs = startObsPublishers({ teardown: (fn) => teardowns.push(fn) });
    const pub = await pubs.publish({ url: `${server.url}/live/${created['id']}/whip`, token: created['stream_key'] as string, source: await stampedH264({ size, frames: 300 }) });
    if (pub.status !== 201) throw new Error(`publish failed: ${pub.status} ${pub.body}`);
    // Enough output for the longest clip: the stream's own report of its first output frame.
    const need = (Math.max(...lengths) + 3) * 1000;
    const warm = progress('output buffering', Math.round(need / 1000));
    let shown = 0;
    for (let i = 0; i < 600; i++) {
      const s = (await (await fetch(`${server.url}/v1/streams/${created['id']}/status`, { headers: auth })).json()) as { data?: { inference_status?: { start_time?: number } } };
      const start = s.data?.inference_status?.start_time ?? 0;
      const have = start > 0 ? Math.min(Math.floor((Date.now() - start) / 1000), Math.round(need / 1000)) : 0;
      if (have > shown) warm.tick(have - shown);
      shown = Math.max(shown, have);
      if (start > 0 && Date.now() - start >= need) break;
      await new Promise((r) => setTimeout(r, 500)); // poll interval
    }
    warm.done();

    const rows: Row[] = [];
    const result: Record<string, unknown> = {};
    const bar = progress('clips', lengths.length * reps);
    for (const seconds of lengths) {
      const ready: number[] = [];
      const downloaded: number[] = [];
      const reencode: number[] = [];
      const durations: number[] = [];
      for (let r = 0; r < reps; r++) {
        const t0 = performance.now();
        const res = await fetch(`${server.url}/v1/streams/${created['id']}/clips`, { method: 'POST', headers: auth, body: JSON.stringify({ seconds }) });
        const clip = (await res.json()) as Record<string, string | number>;
        if (res.status !== 201) throw new Error(`clip failed: ${res.status} ${JSON.stringify(clip)}`);
        const t1 = performance.now();
        const mp4 = Buffer.from(await (await fetch(clip['mp4_url'] as string, { headers: { authorization: auth.authorization } })).arrayBuffer());
        const t2 = performance.now();
        ready.push(t1 - t0);
        downloaded.push(t2 - t0);
        durations.push(Number(clip['duration']));
        // Baseline: the same clip decoded and encoded again (what cutting without our segments costs).
        const file = join(dataDir, `clip-${seconds}-${r}.mp4`);
        writeFileSync(file, mp4);
        const b0 = performance.now();
        execFileSync('ffmpeg', ['-v', 'error', '-i', file, '-c:v', 'libx264', '-preset', 'ultrafast', '-an', '-y', join(dataDir, 'reencoded.mp4')]);
        reencode.push(performance.now() - b0);
        bar.tick();
      }
      const s = { ready: summarize(ready), downloaded: summarize(downloaded), reencode: summarize(reencode), duration: summarize(durations) };
      result[`${seconds}s`] = s;
      rows.push({
        clip_s: seconds,
        got_s: s.duration.p50,
        ready_p50_ms: s.ready.p50,
        ready_p95_ms: s.ready.p95,
        downloaded_p50_ms: s.downloaded.p50,
        downloaded_p95_ms: s.downloaded.p95,
        reencode_p50_ms: s.reencode.p50,
        'ours/reencode': s.downloaded.p50 / s.reencode.p50,
      });
    }
    bar.done();
    printTable(`Clips: request → downloaded MP4 (${size}², ${reps} reps each; baseline = the same clip re-encoded with libx264 ultrafast)`, rows);
    console.log(`wrote ${writeResult('clips', { size, reps, rows, ...result })}`);
  } finally {
    for (const fn of teardowns.reverse()) await fn();
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

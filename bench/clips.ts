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
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stampedH264 } from '../test/helpers/h264Source.ts';
import { startLiveServer } from '../test/helpers/liveServer.ts';
import { startObsPublishers } from '../test/helpers/obsPublisher.ts';
import { printTable, progress, summarize, writeResult, type Row } from './lib.ts';

export default async function clips(args: Map<string, string>): Promise<void> {
  const reps = Number(args.get('reps') ?? 3);
  const size = Number(args.get('size') ?? 512);
  const lengths = [2, 10, 30];
  const teardowns: (() => unknown)[] = [];
  const scope = { teardown: (fn: () => unknown) => teardowns.push(fn) };
  try {
    const { url, api, key, dataDir } = await startLiveServer(scope, { env: { ROLES: 'api,media' }, plan: 'internal' });
    const created = (await api('POST', '/v1/streams', { params: { prompt: 'bench', width: size, height: size, skip_diffusion: true } })).body;
    const pubs = startObsPublishers(scope);
    const pub = await pubs.publish({ url: `${url}/live/${created['id']}/whip`, token: created['stream_key'] as string, source: await stampedH264({ size, frames: 300 }) });
    if (pub.status !== 201) throw new Error(`publish failed: ${pub.status} ${pub.body}`);
    // Enough output for the longest clip: the stream's own report of its first output frame.
    const need = (Math.max(...lengths) + 3) * 1000;
    const warm = progress('output buffering', Math.round(need / 1000));
    let shown = 0;
    for (let i = 0; i < 600; i++) {
      const start = ((await api('GET', `/v1/streams/${created['id']}/status`)).body['data']?.['inference_status']?.['start_time'] as number | undefined) ?? 0;
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
        const res = await api('POST', `/v1/streams/${created['id']}/clips`, { seconds });
        const clip = res.body;
        if (res.status !== 201) throw new Error(`clip failed: ${res.status} ${JSON.stringify(clip)}`);
        const t1 = performance.now();
        const mp4 = Buffer.from(await (await fetch(clip['mp4_url'] as string, { headers: { authorization: `Bearer ${key}` } })).arrayBuffer());
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
  }
}

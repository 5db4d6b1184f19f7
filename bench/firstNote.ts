/**
 * `npm run bench -- firstNote [--runs 8] [--load 2] [--duration 120] [--stems true]`
 * Time from `POST /music/v1/songs` to the first MP3 byte of take 1 as a client receives it: a real
 * server (api + worker roles, the embedded store) in this process, a client that polls the song
 * every 20 ms until take 1 streams, then fetches its stable URL (302 to the signed link, the body
 * as LAME writes it). `--load N` runs N busy-loop processes beside it for the whole bench (the
 * standard background load: 2, one per core of our 2-core machines; 0 for a quiet reading). Each
 * run waits for its song to finish before the next, so runs never queue behind each other.
 * Prints p50/p95 of the first byte and of its parts (POST answered, take 1 streaming, first byte),
 * and the whole song's time; target: first byte ≤ 0.5 s p95 with stems on, under the load.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { createAccountWithKey } from '../control/ApiKeys.ts';
import { loadConfig } from '../control/config.ts';
import { startServer } from '../control/Server.ts';
import { freePort } from '../test/helpers/net.ts';
import { busyLoops, printTable, progress, summarize, writeResult } from './lib.ts';

export default async function bench(args: Map<string, string>): Promise<void> {
  const runs = Number(args.get('runs') ?? 8);
  const load = Number(args.get('load') ?? 2);
  const duration = Number(args.get('duration') ?? 120);
  const stems = (args.get('stems') ?? 'true') !== 'false';
  const prompt = args.get('prompt') ?? 'uplifting trance with supersaw chords, arpeggios and a big lead';
  const dataDir = mkdtempSync(join(tmpdir(), 'rv-bench-firstnote-'));
  // The port is chosen before the config: the signed MP3 links carry the public URL.
  const config = loadConfig({}, { DATA_DIR: dataDir, PORT: await freePort(), HOST: '127.0.0.1', LOG_LEVEL: 'silent', ROLES: 'api,worker' });
  const server = await startServer(config, { logger: pino({ level: 'silent' }) });
  let stopBusy = () => {};
  try {
    const { key } = await createAccountWithKey(server.store, 'pro');
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const base = `${server.url}${config.musicBasePath}`;
    const getSong = async (id: string) => (await (await fetch(`${base}/songs/${id}`, { headers })).json()) as { status: string; streaming_mp3_urls?: string[] };

    /** One song: ms from the POST to each step; the song runs to its end before this returns. */
    const one = async (d: number) => {
      const t0 = performance.now();
      const res = await fetch(`${base}/songs`, { method: 'POST', headers, body: JSON.stringify({ prompt, duration: d, variations: 2, stems }) });
      const tPost = performance.now();
      const body = (await res.json()) as { id?: string; songs?: { id: string }[] };
      const id = body.id ?? body.songs?.[0]?.id;
      if (res.status >= 300 || !id) throw new Error(`POST /songs answered ${res.status}: ${JSON.stringify(body)}`);
      let song = await getSong(id);
      const deadline = Date.now() + 120_000;
      while (!song.streaming_mp3_urls?.length && song.status !== 'done' && song.status !== 'failed') {
        if (Date.now() > deadline) throw new Error(`take 1 of ${id} never streamed (${song.status})`);
        await new Promise((r) => setTimeout(r, 20));
        song = await getSong(id);
      }
      const tStreaming = performance.now();
      const url = song.streaming_mp3_urls?.[0];
      if (!url) throw new Error(`song ${id} ended ${song.status} before take 1 streamed`);
      const mp3 = await fetch(url);
      const reader = mp3.body!.getReader();
      const first = await reader.read();
      const tFirst = performance.now();
      if (first.done || !first.value?.length) throw new Error(`take 1 of ${id}: no MP3 bytes`);
      while (!(await reader.read()).done);
      while (song.status !== 'done' && song.status !== 'failed') {
        if (Date.now() > deadline) throw new Error(`song ${id} did not finish (${song.status})`);
        await new Promise((r) => setTimeout(r, 100));
        song = await getSong(id);
      }
      if (song.status !== 'done') throw new Error(`song ${id} ${song.status}`);
      return { post: tPost - t0, streaming: tStreaming - t0, first: tFirst - t0, done: performance.now() - t0 };
    };

    // Warm-up (the render thread's first song, JIT), quiet.
    await one(10);
    stopBusy = busyLoops(load, 1_800_000);
    const bar = progress('firstNote bench', runs);
    const got: Awaited<ReturnType<typeof one>>[] = [];
    for (let r = 0; r < runs; r++) {
      got.push(await one(duration));
      bar.tick();
    }
    bar.done();
    const ms = (k: keyof (typeof got)[number]) => summarize(got.map((g) => g[k] / 1000));
    const rows = [
      { step: 'POST answered', ...pick(ms('post')) },
      { step: 'take 1 streaming (seen by a 20 ms poll)', ...pick(ms('streaming')) },
      { step: 'first MP3 byte of take 1', ...pick(ms('first')) },
      { step: `whole song (${stems ? 'stems on' : 'no stems'})`, ...pick(ms('done')) },
    ];
    printTable(`firstNote: ${duration} s × 2 takes, stems ${stems ? 'on' : 'off'}, ${load} busy loops beside, runs=${runs}`, rows);
    const f = ms('first');
    console.log(`target: first MP3 byte ≤ 0.5 s p95: ${f.p95 <= 0.5 ? 'met' : 'NOT met'} (${f.p95.toFixed(3)} s)`);
    console.log(`wrote ${writeResult('firstNote', { runs, load, duration, stems, samples: got, rows })}`);
  } finally {
    stopBusy();
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const pick = (s: { p50: number; p95: number; max: number }) => ({ p50_s: s.p50, p95_s: s.p95, max_s: s.max });

/**
 * Soundtrack: what mixing a song's take into a stream's output audio, with one param that follows
 * it, costs the node. The real server (embedded default: API, media node and render worker in this
 * process) renders one song, then holds `--streams` streams (512², 30 fps, OBS-like publishers in a
 * child process) whose LL-HLS output is watched; the soundtrack (the take, looping, ducking the
 * publisher by 12 dB) and one mapping (the take's `rms` → `delta`) are set and cleared for all of
 * them in alternating windows of `--window-s` seconds (off, on, on, off, … so a drift of the shared
 * machine's load cancels). Node CPU = this process's CPU time (all threads: GStreamer,
 * libdatachannel, JS) per wall second, in % of one core, per window; also per output video frame,
 * since the output rate follows the machine's load.
 *
 *   npm run bench -- soundtrack [--streams 2] [--windows 6] [--window-s 6] [--size 512] [--publishers microphone,silent]
 *
 * Two kinds of publisher, one after the other (`--publishers`): `microphone` sends sound (Opus,
 * 20 ms packets, as OBS with a microphone), so "off" already decodes it and encodes AAC for LL-HLS,
 * and "on" adds the mix (its own decoder, the JS mix every 10 ms, the AAC encoder fed from the mix)
 * and the mapping; `silent` sends Opus silence frames, so "off" runs no audio encoder at all (the
 * HLS parts carry silence frames) and "on" adds all of it. Target (live-show issue): on ÷ off ≤ 1.1×.
 */
import { startLiveServer } from '../test/helpers/liveServer.ts';
import { opusTone } from '../test/helpers/opusSource.ts';
import { measureOnOff, publishPassthroughStreams } from './passthroughStreams.ts';
import { printTable, summarize, writeResult, type Row } from './lib.ts';

export default async function soundtrack(args: Map<string, string>): Promise<void> {
  const streams = Number(args.get('streams') ?? 2);
  const windows = Number(args.get('windows') ?? 6);
  const windowS = Number(args.get('window-s') ?? 6);
  const size = Number(args.get('size') ?? 512);
  const publishers = (args.get('publishers') ?? 'microphone,silent').split(',').map((k) => {
    if (k !== 'microphone' && k !== 'silent') throw new Error(`--publishers: microphone or silent, not ${k}`);
    return k;
  });
  const teardowns: (() => unknown)[] = [];
  const scope = { teardown: (fn: () => unknown) => teardowns.push(fn) };
  try {
    const { url, api } = await startLiveServer(scope, { plan: 'internal' });
    const song = await api('POST', '/music/v1/songs', { prompt: 'steady house groove with bass and chords', duration: 20, seed: 5 });
    if (song.status !== 202) throw new Error(`song: ${song.status} ${JSON.stringify(song.body)}`);
    const songId = song.body['id'] as string;
    for (let i = 0; ; i++) {
      const s = (await api('GET', `/music/v1/songs/${songId}`)).body;
      if (s['status'] === 'done') break;
      if (s['status'] === 'failed' || i > 2400) throw new Error(`song not rendered: ${JSON.stringify(s)}`);
      await new Promise((r) => setTimeout(r, 250)); // poll interval
    }

    const rows: Row[] = [];
    const ratios: Record<string, { perSecond: number; perFrame: number; raw: unknown }> = {};
    const mapping = [{ source: 'soundtrack', feature: 'rms', param: 'delta', range: [0.3, 0.9], smoothing_ms: 200 }];
    for (const kind of publishers) {
      const audio = kind === 'microphone' ? await opusTone() : undefined;
      const { ids, playbackIds } = await publishPassthroughStreams(scope, { url, api }, { streams, size, ...(audio ? { audio } : {}) });
      const { cpu, fps, perFrame } = await measureOnOff({ url, api }, { ids, playbackIds }, {
        windows,
        windowS,
        hlsWatch: true, // a watched stream runs the AAC encoder
        toggle: async (mode) => {
          for (const id of ids) {
            const res = mode === 'on' ? await api('PUT', `/v1/streams/${id}/soundtrack`, { song_id: songId, loop: true, duck_publisher_db: -12 }) : await api('DELETE', `/v1/streams/${id}/soundtrack`);
            if (res.status !== 200) throw new Error(`soundtrack ${mode}: ${res.status} ${JSON.stringify(res.body)}`);
            const mapped = await api('PATCH', `/v1/streams/${id}`, { params: { audio_mappings: mode === 'on' ? mapping : [] } });
            if (mapped.status !== 200) throw new Error(`mapping ${mode}: ${mapped.status} ${JSON.stringify(mapped.body)}`);
          }
        },
      });
      // This kind's streams end before the next kind's start.
      for (const id of ids) await api('DELETE', `/v1/streams/${id}`);
      const off = summarize(cpu.off);
      const on = summarize(cpu.on);
      rows.push(
        { publisher: kind, soundtrack: 'off', cpu_p50_pct: off.p50, cpu_p95_pct: off.p95, out_fps_p50: summarize(fps.off).p50, cpu_ms_per_frame_p50: summarize(perFrame.off).p50, cpu_ms_per_frame_p95: summarize(perFrame.off).p95, windows: off.n },
        { publisher: kind, soundtrack: 'on + rms → delta', cpu_p50_pct: on.p50, cpu_p95_pct: on.p95, out_fps_p50: summarize(fps.on).p50, cpu_ms_per_frame_p50: summarize(perFrame.on).p50, cpu_ms_per_frame_p95: summarize(perFrame.on).p95, windows: on.n },
      );
      ratios[kind] = { perSecond: on.p50 / off.p50, perFrame: summarize(perFrame.on).p50 / summarize(perFrame.off).p50, raw: { cpu, fps, perFrame } };
    }
    printTable(`Soundtrack + one mapping: node CPU, ${streams} × ${size}² 30 fps streams, LL-HLS watched, ${windows} windows of ${windowS} s per condition, alternating; target on ÷ off ≤ 1.1×`, rows);
    for (const [kind, r] of Object.entries(ratios)) console.log(`${kind} publishers: on ÷ off p50 ${r.perSecond.toFixed(3)}× per second, ${r.perFrame.toFixed(3)}× per output frame`);
    console.log(`wrote ${writeResult('soundtrack', { streams, size, windows, windowS, publishers, ratios, rows })}`);
  } finally {
    for (const fn of teardowns.reverse()) await fn();
  }
}

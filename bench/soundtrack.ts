/**
 * Soundtrack: what mixing a song's take into a stream's output audio costs the node. The real
 * server (embedded default: API, media node and render worker in this process) renders one song,
 * then holds `--streams` streams (512², 30 fps, OBS-like publishers in a child process: H.264 and
 * Opus silence frames) whose LL-HLS output is watched; the soundtrack (the take, looping, ducking
 * the publisher by 12 dB) is set and cleared for all of them in alternating windows of
 * `--window-s` seconds (off, on, on, off, … so a drift of the shared machine's load cancels).
 * Node CPU = this process's CPU time (all threads: GStreamer, libdatachannel, JS) per wall second,
 * in % of one core, per window; also per output video frame, since the output rate follows the
 * machine's load.
 *
 *   npm run bench -- soundtrack [--streams 2] [--windows 6] [--window-s 6] [--size 512]
 *
 * "off" is the same stream without a soundtrack: its publisher's Opus is silence, so no AAC
 * encoder runs and the HLS parts carry silence frames; "on" adds the Opus decoder, the mix (JS,
 * every 10 ms) and the AAC encoder. Target (live-show issue): on ÷ off ≤ 1.1×.
 */
import { startLiveServer } from '../test/helpers/liveServer.ts';
import { measureOnOff, publishPassthroughStreams } from './passthroughStreams.ts';
import { printTable, summarize, writeResult, type Row } from './lib.ts';

export default async function soundtrack(args: Map<string, string>): Promise<void> {
  const streams = Number(args.get('streams') ?? 2);
  const windows = Number(args.get('windows') ?? 6);
  const windowS = Number(args.get('window-s') ?? 6);
  const size = Number(args.get('size') ?? 512);
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

    const { ids, playbackIds } = await publishPassthroughStreams(scope, { url, api }, { streams, size });

    const { cpu, fps, perFrame } = await measureOnOff({ url, api }, { ids, playbackIds }, {
      windows,
      windowS,
      hlsWatch: true, // a watched stream runs the AAC encoder with a soundtrack
      toggle: async (mode) => {
        for (const id of ids) {
          const res = mode === 'on' ? await api('PUT', `/v1/streams/${id}/soundtrack`, { song_id: songId, loop: true, duck_publisher_db: -12 }) : await api('DELETE', `/v1/streams/${id}/soundtrack`);
          if (res.status !== 200) throw new Error(`soundtrack ${mode}: ${res.status} ${JSON.stringify(res.body)}`);
        }
      },
    });

    const off = summarize(cpu.off);
    const on = summarize(cpu.on);
    const rows: Row[] = [
      { soundtrack: 'off (publisher audio only)', cpu_p50_pct: off.p50, cpu_p95_pct: off.p95, out_fps_p50: summarize(fps.off).p50, cpu_ms_per_frame_p50: summarize(perFrame.off).p50, cpu_ms_per_frame_p95: summarize(perFrame.off).p95, windows: off.n },
      { soundtrack: 'on (take looping, ducking −12 dB)', cpu_p50_pct: on.p50, cpu_p95_pct: on.p95, out_fps_p50: summarize(fps.on).p50, cpu_ms_per_frame_p50: summarize(perFrame.on).p50, cpu_ms_per_frame_p95: summarize(perFrame.on).p95, windows: on.n },
    ];
    const ratio = on.p50 / off.p50;
    const ratioPerFrame = summarize(perFrame.on).p50 / summarize(perFrame.off).p50;
    printTable(`Soundtrack: node CPU, ${streams} × ${size}² 30 fps streams, LL-HLS watched, ${windows} windows of ${windowS} s per condition, alternating; target on ÷ off ≤ 1.1×`, rows);
    console.log(`on ÷ off p50 ${ratio.toFixed(3)}× per second, ${ratioPerFrame.toFixed(3)}× per output frame; on − off p50 ${(on.p50 - off.p50).toFixed(1)} % of a core for ${streams} streams`);
    console.log(`wrote ${writeResult('soundtrack', { streams, size, windows, windowS, ratioP50: ratio, ratioPerFrameP50: ratioPerFrame, rows, raw: { cpu, fps, perFrame } })}`);
  } finally {
    for (const fn of teardowns.reverse()) await fn();
  }
}

/**
 * The streams a node-cost benchmark measures: `streams` passthrough streams (no diffusion) of
 * size², each fed by an OBS-like publisher (stamped H.264, 30 fps, in a child process), returned
 * once every one has had output for 4 s; and the alternating off/on windows those benchmarks
 * measure the node's CPU in.
 */
import { stampedH264 } from '../test/helpers/h264Source.ts';
import type { LiveServer } from '../test/helpers/liveServer.ts';
import { startObsPublishers } from '../test/helpers/obsPublisher.ts';
import { progress } from './lib.ts';

export async function publishPassthroughStreams(
  scope: { teardown(fn: () => unknown): void },
  server: Pick<LiveServer, 'url' | 'api'>,
  o: { streams: number; size: number; /** The publishers' microphone (opusTone); default Opus silence. */ audio?: string },
): Promise<{ ids: string[]; playbackIds: string[] }> {
  const { url, api } = server;
  const pubs = startObsPublishers(scope);
  const source = await stampedH264({ size: o.size, frames: 300 });
  const ids: string[] = [];
  const playbackIds: string[] = [];
  for (let i = 0; i < o.streams; i++) {
    const created = (await api('POST', '/v1/streams', { params: { prompt: 'bench', width: o.size, height: o.size, skip_diffusion: true } })).body;
    const pub = await pubs.publish({ url: `${url}/live/${created['id']}/whip`, token: created['stream_key'] as string, source, ...(o.audio ? { audio: o.audio } : {}) });
    if (pub.status !== 201) throw new Error(`publish failed: ${pub.status} ${pub.body}`);
    ids.push(created['id'] as string);
    playbackIds.push(created['output_playback_id'] as string);
  }
  // Warm: every stream has output for 4 s (bounded: 600 polls of 250 ms).
  for (let i = 0; i < 600; i++) {
    const starts = await Promise.all(ids.map(async (id) => ((await api('GET', `/v1/streams/${id}/status`)).body['data']?.['inference_status']?.['start_time'] as number | undefined) ?? 0));
    if (starts.every((s) => s > 0 && Date.now() - s > 4000)) break;
    await new Promise((r) => setTimeout(r, 250)); // poll interval
  }
  return { ids, playbackIds };
}

export type OnOff = 'off' | 'on';

/** Per condition, one value per window: node CPU % of a core, mean output fps, CPU ms per output frame. */
export interface OnOffWindows {
  cpu: Record<OnOff, number[]>;
  fps: Record<OnOff, number[]>;
  /** CPU ms per output frame: the output rate drifts with a shared machine's load, and CPU follows it. */
  perFrame: Record<OnOff, number[]>;
}

/**
 * `windows` windows per condition, in the order off, on, on, off, … (a drift of the shared
 * machine's load over the run cancels out). Before each, `toggle` sets the condition on every
 * stream, the streams' LL-HLS playlists are requested when `hlsWatch` (a request marks a stream
 * watched for 30 s: its AAC encoder runs), and one second settles; then `windowS` seconds count.
 * Node CPU is this process's CPU time (all threads) per wall second.
 */
export async function measureOnOff(
  server: Pick<LiveServer, 'url' | 'api'>,
  streams: { ids: string[]; playbackIds: string[] },
  o: { windows: number; windowS: number; hlsWatch: boolean; toggle: (mode: OnOff) => Promise<void> },
): Promise<OnOffWindows> {
  const { url, api } = server;
  const out: OnOffWindows = { cpu: { off: [], on: [] }, fps: { off: [], on: [] }, perFrame: { off: [], on: [] } };
  const bar = progress('windows', o.windows * 2);
  for (let w = 0; w < o.windows * 2; w++) {
    const mode = (['off', 'on', 'on', 'off'] as const)[w % 4] as OnOff;
    await o.toggle(mode);
    if (o.hlsWatch) for (const p of streams.playbackIds) await (await fetch(`${url}/hls/${p}/index.m3u8`)).text();
    await new Promise((r) => setTimeout(r, 1000)); // the first second after a change settles (encoders start, writers open)
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, o.windowS * 1000)); // the measured window
    const c1 = process.cpuUsage(c0);
    const wallMs = performance.now() - t0;
    out.cpu[mode].push(((c1.user + c1.system) / 1000 / wallMs) * 100);
    const outs = await Promise.all(streams.ids.map(async (id) => ((await api('GET', `/v1/streams/${id}/status`)).body['data']?.['inference_status']?.['output_fps'] as number | undefined) ?? 0));
    const meanFps = outs.reduce((a, b) => a + b, 0) / outs.length;
    out.fps[mode].push(meanFps);
    if (meanFps > 0) out.perFrame[mode].push((c1.user + c1.system) / 1000 / (meanFps * streams.ids.length * (wallMs / 1000)));
    bar.tick();
  }
  bar.done();
  return out;
}

/**
 * The streams a node-cost benchmark measures: `streams` passthrough streams (no diffusion) of
 * size², each fed by an OBS-like publisher (stamped H.264, 30 fps, in a child process), returned
 * once every one has had output for 4 s.
 */
import { stampedH264 } from '../test/helpers/h264Source.ts';
import type { LiveServer } from '../test/helpers/liveServer.ts';
import { startObsPublishers } from '../test/helpers/obsPublisher.ts';

export async function publishPassthroughStreams(
  scope: { teardown(fn: () => unknown): void },
  server: Pick<LiveServer, 'url' | 'api'>,
  o: { streams: number; size: number },
): Promise<{ ids: string[]; playbackIds: string[] }> {
  const { url, api } = server;
  const pubs = startObsPublishers(scope);
  const source = await stampedH264({ size: o.size, frames: 300 });
  const ids: string[] = [];
  const playbackIds: string[] = [];
  for (let i = 0; i < o.streams; i++) {
    const created = (await api('POST', '/v1/streams', { params: { prompt: 'bench', width: o.size, height: o.size, skip_diffusion: true } })).body;
    const pub = await pubs.publish({ url: `${url}/live/${created['id']}/whip`, token: created['stream_key'] as string, source });
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

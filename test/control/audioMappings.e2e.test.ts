/**
 * Sound-reactive params through the real server (api + media node): a stream created with a
 * mapping, a wrtc publisher sending clicks (VP8 + Opus), the status route showing each mapping's
 * feature and the value it set; PATCH changes the mappings live and `[]` clears them.
 */
import t from 'tap';
import { startLiveServer, type Json } from '../helpers/liveServer.ts';
import { until } from '../helpers/until.ts';
import { wrtcSoundPublish } from '../media/wrtcPeers.ts';

t.test('GET status shows each mapping’s feature value and the value it gave its param; PATCH changes and clears them live', { timeout: 120_000 }, async (t) => {
  const { server, api } = await startLiveServer(t, { env: { ROLES: 'api,media' } });
  const created = await api('POST', '/v1/streams', {
    params: { prompt: 'clicks', width: 384, height: 384, skip_diffusion: true, audio_mappings: [{ source: 'publisher', feature: 'onset', param: 'seed', range: [1, 1000] }] },
  });
  t.equal(created.status, 201, 'stream created with a mapping');
  const id = created.body['id'] as string;
  const pub = await wrtcSoundPublish(t, `${server.url}/live/${id}/whip`, { kind: 'clicks', startMs: 1000, periodMs: 300, count: 1000 }, created.body['stream_key'] as string);
  t.equal(pub.status, 201, 'publisher live');
  const status = async () => (await api('GET', `/v1/streams/${id}/status`)).body['data'] as Json;

  const seen = await until('a click set the seed', status, (d) => typeof d?.['audio_mappings']?.[0]?.['value'] === 'number', 30_000, 200);
  t.match(seen['audio_mappings'], [{ source: 'publisher', feature: 'onset', param: 'seed', feature_value: Number, value: Number }]);
  const seed = seen['audio_mappings'][0]['value'] as number;
  t.ok(seed >= 1 && seed <= 1000, `seed ${seed} of the range`);
  t.equal(seen['inference_status']['last_params']['seed'], 789, 'the stored params keep the seed asked for (mapped values go to the pipeline)');

  const patched = await api('PATCH', `/v1/streams/${id}`, { params: { audio_mappings: [{ source: 'publisher', feature: 'rms', param: 'delta', range: [0.2, 0.8], smoothing_ms: 30 }] } });
  t.equal(patched.status, 200);
  t.equal(patched.headers.get('x-params-update'), 'hot', 'hot');
  const rms = await until('the new mapping runs', status, (d) => d?.['audio_mappings']?.[0]?.['param'] === 'delta' && typeof d['audio_mappings'][0]['value'] === 'number', 30_000, 200);
  const v = rms['audio_mappings'][0]['value'] as number;
  t.ok(v >= 0.2 && v <= 0.8, `delta ${v} within the range`);

  await api('PATCH', `/v1/streams/${id}`, { params: { audio_mappings: [] } });
  const cleared = await until('the mappings are gone', status, (d) => d !== undefined && !('audio_mappings' in d), 30_000, 200);
  t.notOk('audio_mappings' in cleared, 'no mappings in status once cleared');
});

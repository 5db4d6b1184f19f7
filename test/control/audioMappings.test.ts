/**
 * The `audio_mappings` param at the API: hot (set and changed by PATCH without a reload), and
 * every bad mapping a 400 naming its field: a reload-class param, a param that is no single
 * number, a feature that does not exist or does not fit the param, a range outside the param's
 * own bounds, a list entry the stream does not have, too many mappings.
 */
import t from 'tap';
import { makeStreamApp } from './streamApp.ts';

type Json = Record<string, any>;

const onsetSeed = { source: 'publisher', feature: 'onset', param: 'seed', range: [1, 1000], smoothing_ms: 0 };

t.test('audio_mappings is a hot param: PATCH sets it, changes it and clears it without a reload', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const s = (await a.app.inject({ method: 'POST', url: '/v1/streams', headers: h, payload: { params: { prompt: [['a lake', 1], ['a fire', 0]] } } })).json() as Json;
  const patch = (params: Json) => a.app.inject({ method: 'PATCH', url: `/v1/streams/${s.id}`, headers: h, payload: { params } });
  let res = await patch({ audio_mappings: [onsetSeed, { source: 'soundtrack', feature: 'band:low', param: 'prompt_weights[1]', range: [0, 1] }] });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['x-params-update'], 'hot', 'setting mappings is hot');
  t.same(res.json().params.audio_mappings[1], { source: 'soundtrack', feature: 'band:low', param: 'prompt_weights[1]', range: [0, 1], smoothing_ms: 0 }, 'stored with smoothing_ms defaulted');
  res = await patch({ audio_mappings: [{ ...onsetSeed, range: [5, 6] }] });
  t.equal(res.headers['x-params-update'], 'hot', 'changing one is hot');
  res = await patch({ audio_mappings: [] });
  t.equal(res.statusCode, 200);
  t.same(res.json().params.audio_mappings, [], '[] clears them');
});

t.test('a bad mapping is a 400 naming the field, whatever is wrong with it', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const s = (await a.app.inject({ method: 'POST', url: '/v1/streams', headers: h, payload: { params: { prompt: 'a lake' } } })).json() as Json;
  const cases: [string, Json[], string, RegExp][] = [
    ['a reload-class param', [{ ...onsetSeed, feature: 'rms', param: 'width', range: [384, 512] }], 'params.audio_mappings[0].param', /width is not a hot parameter/],
    ['a hot param that is no single number', [{ ...onsetSeed, param: 'prompt' }], 'params.audio_mappings[0].param', /cannot be mapped/],
    ['an unknown param', [{ ...onsetSeed, param: 'loudness' }], 'params.audio_mappings[0].param', /unknown parameter/],
    ['an unknown feature', [{ ...onsetSeed, feature: 'pitch' }], 'params.audio_mappings[0].feature', /./],
    ['an unknown source', [{ ...onsetSeed, source: 'viewer' }], 'params.audio_mappings[0].source', /./],
    ['a seed from a continuous feature', [{ ...onsetSeed, feature: 'rms' }], 'params.audio_mappings[0].feature', /onset or beat/],
    ['a seed range of fractions', [{ ...onsetSeed, range: [0.5, 10] }], 'params.audio_mappings[0].range[0]', /integers/],
    ['a prompt weight below 0', [{ ...onsetSeed, feature: 'rms', param: 'prompt_weights[0]', range: [-1, 1] }], 'params.audio_mappings[0].range[0]', /bounds/],
    ['a range beyond float32', [{ ...onsetSeed, feature: 'rms', param: 'guidance_scale', range: [0, 1e39] }], 'params.audio_mappings[0].range[1]', /bounds/],
    ['a range of one number', [{ ...onsetSeed, range: [1] }], 'params.audio_mappings[0].range', /./],
    ['a negative smoothing', [{ ...onsetSeed, smoothing_ms: -5 }], 'params.audio_mappings[0].smoothing_ms', /./],
    ['an unknown field', [{ ...onsetSeed, gain: 2 }], 'params.audio_mappings[0]', /./],
    ['five mappings', Array.from({ length: 5 }, () => onsetSeed), 'params.audio_mappings', /at most 4/],
    ['a prompt weight of a prompt with no list', [{ ...onsetSeed, feature: 'rms', param: 'prompt_weights[0]', range: [0, 1] }], 'params.audio_mappings[0].param', /weighted prompt list/],
    ['a ControlNet the stream does not have', [{ ...onsetSeed, feature: 'rms', param: 'controlnets[0].conditioning_scale', range: [0, 1] }], 'params.audio_mappings[0].param', /ControlNet 0/],
  ];
  for (const [what, mappings, field, message] of cases) {
    for (const [method, url] of [
      ['PATCH', `/v1/streams/${s.id}`],
      ['POST', '/v1/streams'],
    ] as const) {
      const res = await a.app.inject({ method, url, headers: h, payload: { params: { audio_mappings: mappings } } });
      t.equal(res.statusCode, 400, `${method} ${what}: 400`);
      const issue = ((res.json().details?.issues ?? []) as { field: string; message: string }[]).find((i) => i.field === field);
      t.ok(issue, `${method} ${what}: names ${field} (${JSON.stringify(res.json().details?.issues)})`);
      t.match(issue?.message, message, `${method} ${what}: says why`);
    }
  }
  const after = (await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}`, headers: h })).json() as Json;
  t.notOk('audio_mappings' in after.params, 'nothing refused was stored');
});

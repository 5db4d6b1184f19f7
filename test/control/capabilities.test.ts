/**
 * GET /v1/capabilities over a real app, store and media node: it lists what the node serves (and
 * only that), each model's ControlNets and IP-Adapter types from the validation tables, every
 * preprocessor and processor with a JSON Schema the validation agrees with, and the hot params.
 * Every advertised ControlNet preprocessor is accepted by the API and builds and runs in the real
 * engine (demo models on CPU); every other name is refused.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { buildTinyModel, buildTinyPreprocessors, createFramePipeline, demoModelOptions, type Frame, type ParamsPatch } from '../../native/index.ts';
import { makeStreamApp } from './streamApp.ts';

type Json = Record<string, any>;

t.test('GET /v1/capabilities needs a key and answers in the Area B envelope without one', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const res = await a.app.inject({ method: 'GET', url: '/v1/capabilities' });
  t.equal(res.statusCode, 401);
  t.equal(res.json().code, 'AUTH/UNAUTHORIZED');
});

t.test('GET /v1/capabilities lists the served models, their ControlNets, IP-Adapter types, processors with schemas and hot params', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t, { models: ['stabilityai/sd-turbo', 'stabilityai/sdxl-turbo'] });
  const h = await a.auth();
  const res = await a.app.inject({ method: 'GET', url: '/v1/capabilities', headers: h });
  t.equal(res.statusCode, 200);
  const c = res.json() as Json;
  t.same(
    c.models.map((m: Json) => m.model_id),
    ['stabilityai/sd-turbo', 'stabilityai/sdxl-turbo'],
    'only the models the node serves',
  );
  const turbo = c.models[0] as Json;
  const xl = c.models[1] as Json;
  t.equal(turbo.demo, true, 'demo stand-ins say so');
  t.equal(turbo.family, 'sd21');
  t.equal(turbo.nodes, 1);
  t.ok(turbo.free_slots > 0);
  t.ok(turbo.controlnets.includes('thibaud/controlnet-sd21-canny-diffusers'), 'sd-turbo lists its canny ControlNet');
  t.notOk(turbo.controlnets.some((id: string) => id.includes('sdxl')), 'no SDXL ControlNet on SD 2.1');
  t.same(turbo.ip_adapter, { supported: false, types: [] }, 'SD 2.1 has no IP-Adapter');
  t.same(xl.ip_adapter, { supported: true, types: ['regular', 'faceid'] });
  t.ok(xl.controlnets.length >= 3);

  const canny = c.preprocessors.find((p: Json) => p.name === 'canny');
  t.ok(canny, 'canny preprocessor listed');
  t.ok(canny.params_schema.properties, 'with a JSON Schema of its params');
  const depth = c.preprocessors.find((p: Json) => p.name === 'depth_tensorrt');
  t.equal(depth.params_schema.properties.detect_resolution.default, 518, 'model preprocessors carry their defaults');

  const blur = c.processors.image.find((p: Json) => p.type === 'blur');
  t.equal(blur.params_schema.properties.radius.maximum, 64, 'blur radius bound as the engine checks it');
  t.ok(c.processors.latent.some((p: Json) => p.type === 'latent_feedback'));

  t.ok(c.hot_params.includes('prompt') && c.hot_params.includes('seed'), 'prompt and seed are hot');
  t.notOk(c.hot_params.includes('width'), 'width reloads');
  t.equal(c.control.websocket, '/v1/streams/{id}/control');
  t.equal(c.control.update_rate.max, 300);

  // The schema is the validation's: a blur radius over the advertised maximum is refused by PATCH.
  const created = (await a.app.inject({ method: 'POST', url: '/v1/streams', headers: h, payload: { params: { prompt: 'x' } } })).json() as Json;
  const over = await a.app.inject({
    method: 'PATCH',
    url: `/v1/streams/${created.id}`,
    headers: h,
    payload: { params: { image_preprocessing: { enabled: true, processors: [{ type: 'blur', enabled: true, params: { radius: blur.params_schema.properties.radius.maximum + 1 } }] } } },
  });
  t.equal(over.statusCode, 400, 'a value past the advertised bound is refused');
});

t.test('/openapi.json documents capabilities, the control token and the control WebSocket', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const doc = (await a.app.inject({ method: 'GET', url: '/openapi.json' })).json() as Json;
  t.ok(doc.paths['/v1/capabilities']?.get, 'GET /v1/capabilities');
  t.ok(doc.paths['/v1/streams/{id}/control-token']?.post, 'POST /v1/streams/{id}/control-token');
  t.ok(doc.paths['/v1/streams/{id}/control']?.get, 'GET /v1/streams/{id}/control (upgrade)');
});

/**
 * Daydream's ImageProcessorName (ai-runner's schema), the names a client written against Daydream
 * may put in `controlnets[].preprocessor`, plus one no one knows.
 */
const DAYDREAM_NAMES = [
  'blur', 'canny', 'depth', 'depth_tensorrt', 'external', 'feedback', 'hed', 'lineart', 'mediapipe_pose', 'mediapipe_segmentation',
  'openpose', 'passthrough', 'pose_tensorrt', 'realesrgan_trt', 'sharpen', 'soft_edge', 'standard_lineart', 'temporal_net_tensorrt', 'upscale', 'sobel',
];

t.test('every advertised ControlNet preprocessor is accepted and builds and runs on a real frame in the engine; every other name is refused', { timeout: 120_000 }, async (t) => {
  const a = await makeStreamApp(t, { models: ['stabilityai/sd-turbo'] });
  const h = await a.auth('pro');
  const caps = (await a.app.inject({ method: 'GET', url: '/v1/capabilities', headers: h })).json() as Json;
  const advertised = (caps.preprocessors as Json[]).map((p) => p.name as string);
  t.ok(advertised.includes('passthrough') && advertised.includes('depth_tensorrt'), `advertised: ${advertised.join(', ')}`);

  const CANNY = 'thibaud/controlnet-sd21-canny-diffusers';
  const create = (preprocessor: string, enabled = true) =>
    a.app.inject({ method: 'POST', url: '/v1/streams', headers: h, payload: { params: { controlnets: [{ model_id: CANNY, preprocessor, enabled }] } } });
  for (const name of advertised) {
    const res = await create(name);
    t.equal(res.statusCode, 201, `${name}: advertised and accepted${res.statusCode === 201 ? '' : ` (${JSON.stringify(res.json().details)})`}`);
  }
  for (const name of DAYDREAM_NAMES.filter((n) => !advertised.includes(n))) {
    for (const enabled of [true, false]) {
      const res = await create(name, enabled);
      t.equal(res.statusCode, 400, `${name} (enabled ${enabled}): not advertised, refused`);
      const issue = (res.json().details?.issues ?? [])[0] as Json | undefined;
      t.equal(issue?.field, 'params.controlnets[0].preprocessor', `${name}: names the field`);
      t.match(issue?.message, name === 'sobel' ? /unknown ControlNet preprocessor/ : /not supported .* by this runtime/, `${name}: says why`);
    }
  }

  // The engine: the demo sd-turbo with its ControlNets and the demo preprocessor models, on CPU.
  const dir = mkdtempSync(join(tmpdir(), 'reverie-caps-pre-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const MODEL = 'stabilityai/sd-turbo';
  buildTinyModel(dir, MODEL, demoModelOptions(MODEL));
  buildTinyPreprocessors(dir);
  const W = 128;
  // One frame of GStreamer's test pattern, as RGB24.
  const raw = join(dir, 'frame.rgb');
  execFileSync('gst-launch-1.0', ['-q', 'videotestsrc', 'num-buffers=1', 'pattern=smpte', '!', `video/x-raw,width=${W},height=${W},format=RGB`, '!', 'filesink', `location=${raw}`]);
  const frame: Frame = { width: W, height: W, data: new Uint8Array(readFileSync(raw)), ptsMs: 0 };
  t.equal(frame.data.length, W * W * 3, 'a real frame');
  const logger = pino({ level: 'silent' });
  const base: ParamsPatch = { model_id: MODEL, width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [20] };
  for (const name of advertised) {
    const p = await createFramePipeline({ modelsDir: dir, params: { ...base, controlnets: [{ model_id: CANNY, conditioning_scale: 1, preprocessor: name }] }, logger });
    try {
      const out = await p.process(frame);
      t.equal(p.status().buildError, null, `${name}: builds`);
      const control = p.status().stageMs.control;
      t.ok(control > 0, `${name}: its preprocessor ran (stageMs.control ${control.toFixed(2)} ms)`);
      t.ok(out && out.width === W && new Set(out.data).size > 1, `${name}: a frame comes out`);
    } finally {
      await p.close();
    }
  }
});

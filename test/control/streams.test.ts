/**
 * Area B stream routes over a real app, store and (idle) media node: the Stream record and its
 * defaults, every params rule with a valid and an invalid case (the rejection names the field),
 * PATCH merging and hot/reload classification, the rate limit, legacy ids, the beta prompt route
 * and its filter, status while offline, list, delete, placement and account scoping.
 */
import t from 'tap';
import { DEFAULT_PARAMS, LEGACY_PIPELINE_IDS, MAX_INT, publicParams } from '../../streams/StreamParams.ts';
import { streamStartedEvent } from '../../webhooks/index.ts';
import { makeStreamApp, PUBLIC_URL, type StreamTestApp } from './streamApp.ts';

type Json = Record<string, any>;

async function create(a: StreamTestApp, headers: Record<string, string>, body: unknown) {
  const res = await a.app.inject({ method: 'POST', url: '/v1/streams', headers, payload: body as Json });
  return { status: res.statusCode, body: res.json() as Json, headers: res.headers };
}

function fieldsOf(body: Json): string[] {
  return ((body.details?.issues ?? []) as { field: string }[]).map((i) => i.field);
}

t.test('POST /v1/streams answers 201 with the full Stream record, every default filled in', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const res = await create(a, h, { pipeline: 'streamdiffusion', params: { model_id: 'stabilityai/sd-turbo', prompt: 'a red fox' }, name: 'fox' });
  t.equal(res.status, 201);
  const s = res.body;
  t.match(s.id, /^str_[A-Za-z0-9_-]{22}$/, 'id is str_<id>');
  t.match(s.stream_key, /^sk_[A-Za-z0-9_-]{32}$/, 'stream_key is a long random secret');
  t.equal(s.whip_url, `${PUBLIC_URL}/live/${s.id}/whip`, 'whip_url = {PUBLIC_URL}/live/{id}/whip');
  t.match(s.output_playback_id, /^[0-9a-f]{24}$/);
  t.equal(s.output_stream_url, `${PUBLIC_URL}/live/${s.output_playback_id}/whep`, 'output_stream_url = {PUBLIC_URL}/live/{playback_id}/whep');
  t.equal(s.gateway_host, 'media.example.test');
  t.equal(s.name, 'fox');
  t.match(s.author, /^acc_/, 'author is the account id');
  t.equal(s.from_playground, false);
  t.equal(s.is_smoke_test, false);
  t.ok(Math.abs(Date.parse(s.created_at) - Date.now()) < 10_000, 'created_at is an ISO timestamp of now');
  t.equal(s.pipeline, 'streamdiffusion');
  // Every spec field, plus our one addition: `record` (recording of the output, off by default).
  t.same(Object.keys(s).sort(), ['author', 'created_at', 'from_playground', 'gateway_host', 'id', 'is_smoke_test', 'name', 'output_playback_id', 'output_stream_url', 'params', 'pipeline', 'record', 'stream_key', 'whip_url']);
  t.equal(s.record, false, 'not recorded unless asked');
  t.same(s.params, publicParams({ ...DEFAULT_PARAMS, prompt: 'a red fox' }), 'params = Daydream defaults + what was sent');
  // The spec types lora_dict, the processing blocks and ip_adapter as objects and the style image
  // URL as a string: unset ones are left out, never null.
  t.same(Object.entries(s.params).filter(([, v]) => v === null), [], 'no param is null');
  for (const k of ['lora_dict', 'image_preprocessing', 'image_postprocessing', 'latent_preprocessing', 'latent_postprocessing', 'ip_adapter', 'ip_adapter_style_image_url']) {
    t.notOk(k in s.params, `unset ${k} is omitted`);
  }
  t.equal(s.params.num_inference_steps, 50);
  t.same(s.params.t_index_list, [12, 20, 32]);

  const again = await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}`, headers: h });
  t.same(again.json(), s, 'GET /v1/streams/{id} returns the same record');

  const empty = await create(a, h, {});
  t.equal(empty.status, 201, 'every create field is optional');
  t.same(empty.body.params, publicParams(DEFAULT_PARAMS));

  const nested = await create(a, h, {
    params: {
      model_id: 'Lykon/dreamshaper-8',
      controlnets: [{ model_id: 'lllyasviel/control_v11f1p_sd15_depth' }],
      ip_adapter: { scale: 0.5 },
      image_preprocessing: { processors: [{ type: 'blur' }] },
    },
  });
  t.equal(nested.status, 201);
  t.same(nested.body.params.controlnets, [
    { model_id: 'lllyasviel/control_v11f1p_sd15_depth', conditioning_scale: 1, preprocessor: 'passthrough', enabled: true, preprocessor_params: {}, control_guidance_start: 0, control_guidance_end: 1 },
  ], 'ControlNet defaults filled');
  t.same(nested.body.params.ip_adapter, { scale: 0.5, enabled: true, type: 'regular', weight_type: 'linear' }, 'IP-Adapter defaults filled');
  t.same(nested.body.params.image_preprocessing, { enabled: true, processors: [{ type: 'blur', enabled: true, params: {} }] }, 'processing block defaults filled');

  const noAuth = await a.app.inject({ method: 'POST', url: '/v1/streams', payload: {} });
  t.equal(noAuth.statusCode, 401);
  t.equal(noAuth.json().code, 'AUTH/UNAUTHORIZED');
});

t.test('legacy pipeline_id is accepted and mapped to its model; unknown or contradicting ids are refused', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  for (const [legacy, model] of Object.entries(LEGACY_PIPELINE_IDS)) {
    const res = await create(a, h, { pipeline_id: legacy, pipeline_params: { prompt: 'x' } });
    t.equal(res.status, 201, `${legacy} accepted`);
    t.equal(res.body.params.model_id, model, `${legacy} → ${model}`);
    t.equal(res.body.params.prompt, 'x', 'pipeline_params is the deprecated alias of params');
  }
  t.equal((await create(a, h, { pipeline_id: 'pip_SD-turbo' })).body.params.model_id, 'stabilityai/sd-turbo', 'pip_SD-turbo is sd-turbo (spec)');
  const unknown = await create(a, h, { pipeline_id: 'pip_nope' });
  t.equal(unknown.status, 400);
  t.same(fieldsOf(unknown.body), ['pipeline_id']);
  const contra = await create(a, h, { pipeline_id: 'pip_SDXL-turbo', params: { model_id: 'stabilityai/sd-turbo' } });
  t.equal(contra.status, 400);
  t.same(fieldsOf(contra.body), ['params.model_id']);
  const both = await create(a, h, { params: {}, pipeline_params: {} });
  t.equal(both.status, 400, 'params and pipeline_params together are refused');
});

/** [what, params, valid?, field named on rejection, code on rejection]. */
const RULES: [string, Json, boolean, string?, string?][] = [
  ['width multiple of 64 in range', { width: 448 }, true],
  ['width not divisible by 64', { width: 500 }, false, 'params.width', 'REQUEST/INVALID'],
  ['width below 384', { width: 320 }, false, 'params.width', 'REQUEST/INVALID'],
  ['width above 1024', { width: 1088 }, false, 'params.width', 'REQUEST/INVALID'],
  ['height 1024', { height: 1024 }, true],
  ['height 384', { height: 384 }, true],
  ['height not an integer', { height: 512.5 }, false, 'params.height', 'REQUEST/INVALID'],
  ['t_index_list of 4 non-decreasing', { t_index_list: [0, 0, 10, 50] }, true],
  ['t_index_list empty', { t_index_list: [] }, false, 'params.t_index_list', 'REQUEST/INVALID'],
  ['t_index_list of 5', { t_index_list: [1, 2, 3, 4, 5] }, false, 'params.t_index_list', 'REQUEST/INVALID'],
  ['t_index_list decreasing', { t_index_list: [10, 5] }, false, 'params.t_index_list[1]', 'REQUEST/INVALID'],
  ['t_index_list above 50', { t_index_list: [51], num_inference_steps: 100 }, false, 'params.t_index_list[0]', 'REQUEST/INVALID'],
  ['t_index_list negative', { t_index_list: [-1] }, false, 'params.t_index_list[0]', 'REQUEST/INVALID'],
  ['t_index_list above num_inference_steps', { t_index_list: [20], num_inference_steps: 10 }, false, 'params.t_index_list[0]', 'STREAMS/INVALID_PARAMS'],
  ['t_index_list equal to num_inference_steps', { t_index_list: [10], num_inference_steps: 10 }, true],
  // The spec bounds num_inference_steps by ±(2^53 − 1) only: 0 is accepted (run as 1), but the
  // default t_index_list [12, 20, 32] is above it, which the spec's own t_index rule refuses.
  ['num_inference_steps 0 with the default t_index_list', { num_inference_steps: 0 }, false, 'params.t_index_list[0]', 'STREAMS/INVALID_PARAMS'],
  ['num_inference_steps 0 with t_index_list [0]', { num_inference_steps: 0, t_index_list: [0] }, true],
  ['num_inference_steps 200', { num_inference_steps: 200 }, true],
  ['seed at the integer bound', { seed: MAX_INT }, true],
  ['seed at the negative bound', { seed: -MAX_INT }, true],
  ['seed beyond the integer bound', { seed: MAX_INT + 1 }, false, 'params.seed', 'REQUEST/INVALID'],
  ['weighted seed list', { seed: [[1, 0.5], [2, 0.5]] }, true],
  ['weighted seed list with a fractional seed', { seed: [[1.5, 1]] }, false, 'params.seed', 'REQUEST/INVALID'],
  ['empty seed list', { seed: [] }, false, 'params.seed', 'REQUEST/INVALID'],
  ['weighted prompt list', { prompt: [['a cat', 1], ['a dog', 0.5]] }, true],
  ['weighted prompt without weight', { prompt: [['a cat']] }, false, 'params.prompt', 'REQUEST/INVALID'],
  ['weighted prompt with a negative weight', { prompt: [['a cat', -1]] }, false, 'params.prompt[0][1]', 'REQUEST/INVALID'],
  ['similar_image_filter_max_skip_frame at the bound', { similar_image_filter_max_skip_frame: MAX_INT }, true],
  ['similar_image_filter_max_skip_frame negative (run as 0)', { similar_image_filter_max_skip_frame: -1 }, true],
  ['similar_image_filter_max_skip_frame beyond the spec bound', { similar_image_filter_max_skip_frame: -MAX_INT - 2 }, false, 'params.similar_image_filter_max_skip_frame', 'REQUEST/INVALID'],
  ['model_id enum', { model_id: 'prompthero/openjourney-v4' }, true],
  ['model_id unknown', { model_id: 'runwayml/stable-diffusion-v1-5' }, false, 'params.model_id', 'REQUEST/INVALID'],
  ['acceleration enum', { acceleration: 'xformers' }, true],
  ['acceleration unknown', { acceleration: 'cuda' }, false, 'params.acceleration', 'REQUEST/INVALID'],
  ['prompt_interpolation_method unknown', { prompt_interpolation_method: 'cubic' }, false, 'params.prompt_interpolation_method', 'REQUEST/INVALID'],
  ['seed_interpolation_method slerp', { seed_interpolation_method: 'slerp' }, true],
  ['similar_image_filter_threshold above 1 (never skips)', { similar_image_filter_threshold: 1.5 }, true],
  ['similar_image_filter_threshold beyond float32', { similar_image_filter_threshold: 1e39 }, false, 'params.similar_image_filter_threshold', 'REQUEST/INVALID'],
  ['unknown field', { colour: 'red' }, false, 'params', 'REQUEST/INVALID'],
  ['lora_dict', { lora_dict: { 'some/lora': 0.8 } }, true],
  ['lora_dict with a string weight', { lora_dict: { my_lora: 'high' } }, false, 'params.lora_dict.my_lora', 'REQUEST/INVALID'],
  ['ControlNet compatible with sd-turbo', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-canny-diffusers', preprocessor: 'canny', conditioning_scale: 0.7 }] }, true],
  ['a ControlNet preprocessor the runtime lacks is refused by name', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-openpose-diffusers', preprocessor: 'mediapipe_pose' }] }, false, 'params.controlnets[0].preprocessor', 'REQUEST/INVALID'],
  ['pose_tensorrt preprocessor', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-openpose-diffusers', preprocessor: 'pose_tensorrt', preprocessor_params: { threshold: 0.3 } }] }, true],
  ['depth_tensorrt preprocessor', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-depth-diffusers', preprocessor: 'depth_tensorrt', preprocessor_params: { detect_resolution: 392 } }] }, true],
  ['soft_edge preprocessor', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-hed-diffusers', preprocessor: 'soft_edge', preprocessor_params: { safe: true } }] }, true],
  ['depth_tensorrt detect_resolution not a multiple of 14', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-depth-diffusers', preprocessor: 'depth_tensorrt', preprocessor_params: { detect_resolution: 500 } }] }, false, 'params.controlnets[0].preprocessor_params', 'STREAMS/INVALID_PARAMS'],
  ['soft_edge with an unknown param', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-hed-diffusers', preprocessor: 'soft_edge', preprocessor_params: { sharpness: 2 } }] }, false, 'params.controlnets[0].preprocessor_params', 'STREAMS/INVALID_PARAMS'],
  ['canny with bad thresholds', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-canny-diffusers', preprocessor: 'canny', preprocessor_params: { low_threshold: 'low' } }] }, false, 'params.controlnets[0].preprocessor_params', 'STREAMS/INVALID_PARAMS'],
  ['TemporalNet for sd-turbo is refused until its 6-channel condition exists', { controlnets: [{ model_id: 'daydreamlive/TemporalNet2-stable-diffusion-2-1' }] }, false, 'params.controlnets[0].model_id', 'STREAMS/INVALID_PARAMS'],
  ['TemporalNet for dreamshaper-8 is refused', { model_id: 'Lykon/dreamshaper-8', controlnets: [{ model_id: 'daydreamlive/TemporalNet2-stable-diffusion-v1-5' }] }, false, 'params.controlnets[0].model_id', 'STREAMS/INVALID_PARAMS'],
  ['a disabled TemporalNet entry is accepted (not loaded)', { controlnets: [{ model_id: 'daydreamlive/TemporalNet2-stable-diffusion-2-1', enabled: false }] }, true],
  ['ControlNet of SDXL on sd-turbo', { controlnets: [{ model_id: 'xinsir/controlnet-depth-sdxl-1.0' }] }, false, 'params.controlnets[0].model_id', 'STREAMS/INVALID_PARAMS'],
  ['ControlNet listed twice', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-hed-diffusers' }, { model_id: 'thibaud/controlnet-sd21-hed-diffusers' }] }, false, 'params.controlnets[1].model_id', 'STREAMS/INVALID_PARAMS'],
  ['ControlNet id unknown', { controlnets: [{ model_id: 'someone/controlnet' }] }, false, 'params.controlnets[0].model_id', 'REQUEST/INVALID'],
  ['ControlNet preprocessor unknown', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-canny-diffusers', preprocessor: 'sobel' }] }, false, 'params.controlnets[0].preprocessor', 'REQUEST/INVALID'],
  ['ControlNet guidance start after end', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-canny-diffusers', control_guidance_start: 0.8, control_guidance_end: 0.2 }] }, false, 'params.controlnets[0].control_guidance_start', 'STREAMS/INVALID_PARAMS'],
  ['ControlNet guidance end above 1', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-canny-diffusers', control_guidance_end: 1.2 }] }, false, 'params.controlnets[0].control_guidance_end', 'REQUEST/INVALID'],
  ['SD1.5 ControlNets on dreamshaper-8', { model_id: 'Lykon/dreamshaper-8', controlnets: [{ model_id: 'lllyasviel/control_v11f1e_sd15_tile' }, { model_id: 'lllyasviel/control_v11f1p_sd15_depth' }] }, true],
  ['SDXL ControlNets on sdxl-turbo', { model_id: 'stabilityai/sdxl-turbo', controlnets: [{ model_id: 'xinsir/controlnet-canny-sdxl-1.0' }, { model_id: 'xinsir/controlnet-tile-sdxl-1.0' }] }, true],
  ['IP-Adapter on sd-turbo', { ip_adapter: { scale: 0.5 } }, false, 'params.ip_adapter', 'STREAMS/INVALID_PARAMS'],
  ['IP-Adapter on sdxl-turbo', { model_id: 'stabilityai/sdxl-turbo', ip_adapter: { scale: 0.5, weight_type: 'style transfer' } }, true],
  ['IP-Adapter faceid on sdxl-turbo', { model_id: 'stabilityai/sdxl-turbo', ip_adapter: { type: 'faceid' } }, false, 'params.ip_adapter.type', 'STREAMS/INVALID_PARAMS'],
  ['IP-Adapter weight_type unknown', { model_id: 'stabilityai/sdxl-turbo', ip_adapter: { weight_type: 'sideways' } }, false, 'params.ip_adapter.weight_type', 'REQUEST/INVALID'],
  ['style image over https', { model_id: 'Lykon/dreamshaper-8', ip_adapter_style_image_url: 'https://img.example.com/style.png' }, true],
  ['style image over http', { model_id: 'Lykon/dreamshaper-8', ip_adapter_style_image_url: 'http://img.example.com/style.png' }, false, 'params.ip_adapter_style_image_url', 'REQUEST/INVALID'],
  ['style image on sd-turbo', { ip_adapter_style_image_url: 'https://img.example.com/style.png' }, false, 'params.ip_adapter_style_image_url', 'STREAMS/INVALID_PARAMS'],
  ['image processor the runtime has', { image_postprocessing: { processors: [{ type: 'blur', params: { radius: 2 } }, { type: 'sharpen' }] } }, true],
  ['image processor the runtime lacks', { image_preprocessing: { processors: [{ type: 'depth' }] } }, false, 'params.image_preprocessing.processors[0].type', 'STREAMS/INVALID_PARAMS'],
  ['image processor unknown', { image_preprocessing: { processors: [{ type: 'blur' }, { type: 'warp' }] } }, false, 'params.image_preprocessing.processors[1].type', 'STREAMS/INVALID_PARAMS'],
  ['image processor params out of range', { image_preprocessing: { processors: [{ type: 'blur', params: { radius: 1000 } }] } }, false, 'params.image_preprocessing.processors[0].params', 'STREAMS/INVALID_PARAMS'],
  ['latent processor in a latent chain', { latent_preprocessing: { processors: [{ type: 'latent_feedback', params: { feedback_strength: 0.2 } }] } }, true],
  ['latent processor in an image chain', { image_postprocessing: { processors: [{ type: 'latent_feedback' }] } }, false, 'params.image_postprocessing.processors[0].type', 'STREAMS/INVALID_PARAMS'],
  ['processor entry missing type', { latent_postprocessing: { processors: [{ enabled: true }] } }, false, 'params.latent_postprocessing.processors[0].type', 'REQUEST/INVALID'],
  ['guidance_scale', { guidance_scale: 7.5 }, true],
  ['guidance_scale not a number', { guidance_scale: 'high' }, false, 'params.guidance_scale', 'REQUEST/INVALID'],
  // Bounds the spec does not state are kept only where the engine cannot work outside them.
  ['guidance_scale above 20', { guidance_scale: 25 }, true],
  ['guidance_scale beyond float32', { guidance_scale: 1e39 }, false, 'params.guidance_scale', 'REQUEST/INVALID'],
  ['delta above 1', { delta: 1.5 }, true],
  ['num_inference_steps 1000', { num_inference_steps: 1000 }, true],
  ['num_inference_steps 1001 (run as 1000)', { num_inference_steps: 1001 }, true],
  ['num_inference_steps beyond the spec bound', { num_inference_steps: MAX_INT + 2 }, false, 'params.num_inference_steps', 'REQUEST/INVALID'],
  ['conditioning_scale above 2', { controlnets: [{ model_id: 'thibaud/controlnet-sd21-canny-diffusers', conditioning_scale: 3 }] }, true],
  ['IP-Adapter scale above 2', { model_id: 'Lykon/dreamshaper-8', ip_adapter: { scale: 2.5 } }, true],
  ['LoRA weight above 10', { lora_dict: { 'some/lora': 12 } }, true],
  ['safety_checker_threshold above 1', { safety_checker_threshold: 1.2 }, true],
  ['booleans', { use_safety_checker: false, do_add_noise: false, skip_diffusion: true, use_denoising_batch: false, enable_similar_image_filter: true }, true],
  ['boolean as a string', { skip_diffusion: 'yes' }, false, 'params.skip_diffusion', 'REQUEST/INVALID'],
];

t.test('every params rule: a valid case is created, an invalid one is refused naming the field', { timeout: 60_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth('pro');
  for (const [what, params, valid, field, code] of RULES) {
    const res = await create(a, h, { pipeline: 'streamdiffusion', params });
    if (valid) {
      t.equal(res.status, 201, `${what}: accepted${res.status === 201 ? '' : ` (${JSON.stringify(res.body.details)})`}`);
      continue;
    }
    t.equal(res.status, 400, `${what}: 400`);
    t.equal(res.body.code, code, `${what}: ${code}`);
    t.ok(fieldsOf(res.body).includes(field!), `${what}: details name ${field} (got ${fieldsOf(res.body).join(', ')})`);
    t.ok((res.body.error as string).includes(field!.split('.').pop()!.replace(/(\[\d+\])+$/, '')), `${what}: the message names the field`);
  }
});

t.test('create body: pipeline must be streamdiffusion, output_rtmp_url must be rtmp(s), unknown fields refused', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  t.equal((await create(a, h, { output_rtmp_url: 'rtmps://live.example.com/app/key' })).status, 201, 'rtmps URL accepted');
  const http = await create(a, h, { output_rtmp_url: 'http://live.example.com/app/key' });
  t.equal(http.status, 400);
  t.same(fieldsOf(http.body), ['output_rtmp_url']);
  const pipe = await create(a, h, { pipeline: 'comfyui' });
  t.equal(pipe.status, 400);
  t.same(fieldsOf(pipe.body), ['pipeline']);
  const extra = await create(a, h, { is_smoke_test: true });
  t.equal(extra.status, 400, 'is_smoke_test is not a create field');
});

t.test('integers at the spec bound ±9007199254740991 are accepted and run clamped to what the engine can do', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const created = await create(a, h, { params: { num_inference_steps: MAX_INT, similar_image_filter_max_skip_frame: -MAX_INT, enable_similar_image_filter: true } });
  t.equal(created.status, 201, `the spec's extremes are accepted (${JSON.stringify(created.body.details ?? '')})`);
  const s = created.body;
  t.equal(s.params.num_inference_steps, 1000, 'num_inference_steps is stored and shown clamped to the 1000 training timesteps');
  t.equal(s.params.similar_image_filter_max_skip_frame, 0, 'a negative max skip is stored and shown as 0');
  const patch = (body: Json) => a.app.inject({ method: 'PATCH', url: `/v1/streams/${s.id}`, headers: h, payload: body });

  let res = await patch({ params: { num_inference_steps: 1001 } });
  t.equal(res.statusCode, 200, 'PATCH above 1000 is accepted');
  t.equal(res.headers['x-params-update'], 'none', 'and the plan sees no change: the engine already runs 1000 steps');
  res = await patch({ params: { num_inference_steps: -MAX_INT, t_index_list: [0], similar_image_filter_max_skip_frame: MAX_INT } });
  t.equal(res.statusCode, 200, `PATCH at the negative extreme is accepted (${JSON.stringify(res.json().details ?? '')})`);
  t.equal(res.headers['x-params-update'], 'reload', 'steps and max skip changed (max skip reloads)');
  t.equal(res.json().params.num_inference_steps, 1, 'run as 1 step');
  t.equal(res.json().params.similar_image_filter_max_skip_frame, MAX_INT, 'the upper extreme of max skip is kept as sent');

  const status = (await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}/status`, headers: h })).json() as Json;
  const last = (status.data ?? status).inference_status.last_params as Json;
  t.equal(last.num_inference_steps, 1, 'the status shows the effective value');
  t.equal((await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}`, headers: h })).json().params.num_inference_steps, 1, 'GET shows the effective value');

  res = await patch({ params: { num_inference_steps: MAX_INT + 2 } });
  t.equal(res.statusCode, 400, 'beyond the spec bound is still refused');
  t.same([...new Set(fieldsOf(res.json()))], ['params.num_inference_steps'], 'naming the field');
});

t.test('the Area B envelope carries every field on a refusal', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const res = await a.app.inject({ method: 'POST', url: '/v1/streams', headers: { ...h, 'x-request-id': 'req-abc', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }, payload: { params: { width: 100 } } });
  t.same(Object.keys(res.json()).sort(), ['code', 'details', 'error', 'requestId', 'status', 'success', 'traceId']);
  t.match(res.json(), { success: false, code: 'REQUEST/INVALID', status: 400, requestId: 'req-abc', traceId: '0af7651916cd43dd8448eb211c80319c' });
  t.match(res.json().details, { where: 'body', issues: [{ field: 'params.width', message: String }] });
});

t.test('PATCH merges only what changes, validates the merged params and says hot or reload', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const s = (await create(a, h, { params: { model_id: 'Lykon/dreamshaper-8', prompt: 'a cat', controlnets: [{ model_id: 'lllyasviel/control_v11p_sd15_canny', conditioning_scale: 0.5 }], ip_adapter: { scale: 0.4 } } })).body;
  const patch = (body: Json, id = s.id) => a.app.inject({ method: 'PATCH', url: `/v1/streams/${id}`, headers: h, payload: body });

  let res = await patch({ params: { prompt: 'a dog', guidance_scale: 1.2 } });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['x-params-update'], 'hot', 'prompt + guidance_scale are hot');
  t.equal(res.headers['x-params-update-by'], 'api', 'no pipeline runs the stream (no publisher): the API planned it');
  t.equal(res.json().params.prompt, 'a dog');
  t.equal(res.json().params.guidance_scale, 1.2);
  t.equal(res.json().params.model_id, 'Lykon/dreamshaper-8', 'other params are kept');
  t.same((await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}`, headers: h })).json().params, res.json().params, 'stored');

  res = await patch({ pipeline: 'streamdiffusion', params: { controlnets: [{ model_id: 'lllyasviel/control_v11p_sd15_canny', conditioning_scale: 0.9 }] } });
  t.equal(res.headers['x-params-update'], 'hot', 'a ControlNet scale change alone is hot');
  res = await patch({ params: { controlnets: [{ model_id: 'lllyasviel/control_v11p_sd15_canny', conditioning_scale: 0.9, preprocessor: 'canny' }] } });
  t.equal(res.headers['x-params-update'], 'reload', 'a ControlNet preprocessor change reloads');
  res = await patch({ params: { controlnets: [{ model_id: 'lllyasviel/control_v11p_sd15_canny', conditioning_scale: 0.9, preprocessor: 'canny', preprocessor_params: { low_threshold: 50 } }] } });
  t.equal(res.headers['x-params-update'], 'hot', 'a preprocessor_params change is hot');
  res = await patch({ params: { controlnets: [] } });
  t.equal(res.headers['x-params-update'], 'reload', 'removing a ControlNet reloads');
  res = await patch({ params: { ip_adapter: { scale: 0.8 } } });
  t.equal(res.headers['x-params-update'], 'hot', 'an IP-Adapter scale change is hot');
  t.same(res.json().params.ip_adapter, { scale: 0.8, enabled: true, type: 'regular', weight_type: 'linear' }, 'ip_adapter merged field by field');
  res = await patch({ params: { width: 640 } });
  t.equal(res.headers['x-params-update'], 'reload', 'width reloads');
  res = await patch({ params: { width: 640 } });
  t.equal(res.headers['x-params-update'], 'none', 'the same value again changes nothing');
  res = await patch({ params: { ip_adapter: null } });
  t.notOk('ip_adapter' in res.json().params, 'null resets a field to its default (unset: omitted)');
  t.equal(res.headers['x-params-update'], 'hot', 'removing the IP-Adapter is hot');
  res = await patch({ params: { ip_adapter: { scale: 0.5 } } });
  t.equal(res.headers['x-params-update'], 'hot', 'adding the IP-Adapter is hot');

  res = await patch({ params: { num_inference_steps: 10 } });
  t.equal(res.statusCode, 400, 'steps below the stored t_index_list are refused');
  t.equal(res.json().code, 'STREAMS/INVALID_PARAMS');
  t.ok(fieldsOf(res.json()).includes('params.t_index_list[0]'), 'validated against the merged params');
  res = await patch({ params: { num_inference_steps: 10, t_index_list: [2, 6] } });
  t.equal(res.statusCode, 200, 'both together are fine');
  res = await patch({ params: { model_id: 'stabilityai/sd-turbo', controlnets: [{ model_id: 'lllyasviel/control_v11p_sd15_canny' }] } });
  t.ok(fieldsOf(res.json()).includes('params.controlnets[0].model_id'), 'a model switch checks the ControlNets against the new model');

  res = await patch({ pipeline: 'other', params: {} });
  t.equal(res.statusCode, 400);
  res = await patch({});
  t.equal(res.statusCode, 400, 'params is required');
  t.same(fieldsOf(res.json()), ['params']);
  res = await patch({ params: { prompt: 'x' } }, 'str_missing');
  t.equal(res.statusCode, 404);
  t.equal(res.json().code, 'STREAMS/NOT_FOUND');
});

t.test('PATCH is rate limited to 300 a minute per account: 429 with Retry-After in the header and the envelope', { timeout: 60_000 }, async (t) => {
  let clock = Date.parse('2026-03-01T12:00:00Z');
  const a = await makeStreamApp(t, { now: () => clock });
  const h = await a.auth();
  const other = await a.auth();
  const s = (await create(a, h, {})).body;
  const o = (await create(a, other, {})).body;
  const patch = (headers: Json, id: string, i: number) => a.app.inject({ method: 'PATCH', url: `/v1/streams/${id}`, headers, payload: { params: { seed: i } } });
  const prompt = (headers: Json, id: string) =>
    a.app.inject({ method: 'POST', url: `/beta/streams/${id}/prompts`, headers, payload: { pipeline: 'live-video-to-video', model_id: 'streamdiffusion', params: { prompt: 'x' } } });
  // Requests for a stream that is not the caller's are 404 and spend nothing of the caller's budget.
  for (let i = 0; i < 20; i++) t.equal((await patch(h, o.id, i)).statusCode, 404);
  for (let i = 0; i < 300; i++) {
    const res = await patch(h, s.id, i);
    if (res.statusCode !== 200) {
      t.fail(`request ${i + 1} answered ${res.statusCode}`);
      break;
    }
    if (i === 149) clock += 30_000;
  }
  const over = await patch(h, s.id, 1);
  t.equal(over.statusCode, 429, 'the 301st inside a minute is refused');
  t.equal(over.json().code, 'STREAMS/RATE_LIMITED');
  t.equal(over.headers['retry-after'], '30', 'Retry-After: the first 150 leave the window in 30 s');
  t.same(over.json().details, { retry_after_seconds: 30, limit: 300, window_seconds: 60 }, 'and in the envelope');
  t.equal((await patch(other, o.id, 1)).statusCode, 200, 'another account has its own budget');
  t.equal((await patch(h, o.id, 1)).statusCode, 404, "over its budget, the caller still gets 404 for another account's stream");
  t.equal((await prompt(h, s.id)).statusCode, 200, 'the beta prompt route has a budget of its own');
  clock += 30_000;
  t.equal((await patch(h, s.id, 2)).statusCode, 200, 'a sliding window: allowed again once the oldest leave');
});

t.test('the beta prompt route has its own 300-a-minute budget, which PATCH does not spend', { timeout: 60_000 }, async (t) => {
  const clock = Date.parse('2026-03-01T12:00:00Z');
  const a = await makeStreamApp(t, { now: () => clock });
  const h = await a.auth();
  const s = (await create(a, h, {})).body;
  const prompt = (i: number) =>
    a.app.inject({ method: 'POST', url: `/beta/streams/${s.id}/prompts`, headers: h, payload: { pipeline: 'live-video-to-video', model_id: 'streamdiffusion', params: { seed: i } } });
  for (let i = 0; i < 300; i++) {
    const res = await prompt(i);
    if (res.statusCode !== 200) {
      t.fail(`prompt ${i + 1} answered ${res.statusCode}`);
      break;
    }
  }
  const over = await prompt(1);
  t.equal(over.statusCode, 429, 'the 301st prompt inside a minute is refused');
  t.match(over.json().error, /prompt submissions/);
  t.equal((await a.app.inject({ method: 'PATCH', url: `/v1/streams/${s.id}`, headers: h, payload: { params: { seed: 5 } } })).statusCode, 200, 'PATCH keeps its own budget');
});

t.test("another account's stream is 404 STREAMS/NOT_FOUND on every route", { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const owner = await a.auth();
  const stranger = await a.auth();
  const s = (await create(a, owner, {})).body;
  const calls: [string, string, Json?][] = [
    ['GET', `/v1/streams/${s.id}`],
    ['PATCH', `/v1/streams/${s.id}`, { params: { prompt: 'x' } }],
    ['GET', `/v1/streams/${s.id}/status`],
    ['POST', `/beta/streams/${s.id}/prompts`, { pipeline: 'live-video-to-video', model_id: 'streamdiffusion', params: { prompt: 'x' } }],
    ['DELETE', `/v1/streams/${s.id}`],
    ['DELETE', `/v1/streams?id=${s.id}`],
  ];
  for (const [method, url, payload] of calls) {
    const res = await a.app.inject({ method: method as 'GET', url, headers: stranger, ...(payload ? { payload } : {}) });
    t.equal(res.statusCode, 404, `${method} ${url.replace(s.id, '{id}')}`);
    t.equal(res.json().code, 'STREAMS/NOT_FOUND');
  }
  const list = await a.app.inject({ method: 'GET', url: '/v1/streams', headers: stranger });
  t.same(list.json().data, [], 'not listed for another account');
  t.equal((await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}`, headers: owner })).statusCode, 200, 'still there for its owner');
});

t.test('POST /beta/streams/{id}/prompts updates with the full body and censors unsafe prompts', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const s = (await create(a, h, {})).body;
  const submit = (body: Json) => a.app.inject({ method: 'POST', url: `/beta/streams/${s.id}/prompts`, headers: h, payload: body });

  let res = await submit({ pipeline: 'live-video-to-video', model_id: 'streamdiffusion', params: { prompt: 'a lighthouse at dusk', seed: 42 } });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { success: true, message: 'Params updated', was_censored: false });
  t.same(Object.keys(res.json()).sort(), ['message', 'success', 'was_censored']);

  res = await submit({ pipeline: 'live-video-to-video', model_id: 'streamdiffusion', params: { prompt: 'a NAKED woman, nsfw, on a beach' } });
  t.equal(res.statusCode, 200, 'censoring is not an error');
  t.equal(res.json().was_censored, true);
  const stored = (await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}`, headers: h })).json();
  t.equal(stored.params.prompt, 'a woman, on a beach', 'offending words removed, the rest kept');

  res = await submit({ pipeline: 'live-video-to-video', model_id: 'streamdiffusion-sdxl', params: { prompt: 'x' } });
  t.equal(res.statusCode, 200, 'model_id streamdiffusion-sdxl moves the stream to its family default');
  t.equal(res.json().message, 'Params updated; the pipeline is reloading');
  t.equal((await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}`, headers: h })).json().params.model_id, 'stabilityai/sdxl-turbo');

  res = await submit({ pipeline: 'live-video-to-video', model_id: 'streamdiffusion-sd15', params: { model_id: 'stabilityai/sdxl-turbo' } });
  t.equal(res.statusCode, 400, 'params.model_id outside the variant family');
  t.same(fieldsOf(res.json()), ['params.model_id']);

  res = await submit({ pipeline: 'live-video-to-video', model_id: 'streamdiffusion-sdxl', params: { ip_adapter: { type: 'faceid' } } });
  t.equal(res.statusCode, 400, 'faceid needs the sdxl-faceid variant');
  t.match(res.json().error, /faceid/);
  res = await submit({ pipeline: 'live-video-to-video', model_id: 'streamdiffusion-sdxl-faceid', params: { ip_adapter: { type: 'faceid', scale: 0.6 } } });
  t.equal(res.statusCode, 200, 'faceid accepted on the sdxl-faceid variant');
  res = await a.app.inject({ method: 'PATCH', url: `/v1/streams/${s.id}`, headers: h, payload: { params: { ip_adapter: { scale: 0.7 } } } });
  t.equal(res.statusCode, 200, 'a later PATCH keeps the admitted faceid adapter');

  res = await submit({ pipeline: 'video-to-video', model_id: 'streamdiffusion', params: {} });
  t.equal(res.statusCode, 400);
  t.same(fieldsOf(res.json()), ['pipeline']);
  res = await submit({ pipeline: 'live-video-to-video', model_id: 'streamdiffusion-sd21', params: {} });
  t.same(fieldsOf(res.json()), ['model_id']);

  const created = await create(a, h, { params: { prompt: [['nude statue', 1], ['a garden', 1]], negative_prompt: 'nsfw, nude' } });
  t.equal(created.headers['x-prompt-censored'], 'true', 'create filters prompts too (header says so)');
  t.same(created.body.params.prompt, [['statue', 1], ['a garden', 1]], 'weighted prompts are filtered entry by entry');
  t.equal(created.body.params.negative_prompt, 'nsfw, nude', 'negative prompts are not filtered');
  const patched = await a.app.inject({ method: 'PATCH', url: `/v1/streams/${created.body.id}`, headers: h, payload: { params: { prompt: 'porn' } } });
  t.equal(patched.headers['x-prompt-censored'], 'true', 'PATCH filters prompts too');
  t.equal(patched.json().params.prompt, '');
});

t.test('GET /v1/streams/{id}/status answers the envelope; with no live pipeline state is OFFLINE without timestamps', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const s = (await create(a, h, { params: { prompt: 'a cat' } })).body;
  const res = await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}/status`, headers: h });
  t.equal(res.statusCode, 200);
  const body = res.json();
  t.same(Object.keys(body).sort(), ['data', 'error', 'success']);
  t.equal(body.success, true);
  t.equal(body.error, null);
  const d = body.data;
  t.match(d, { stream_id: s.id, request_id: '', pipeline_id: 'streamdiffusion', type: 'status', pipeline: 'streamdiffusion', state: 'OFFLINE', demo: true });
  const record = await a.store.streams.get(s.id);
  t.equal(d.pipeline_id, streamStartedEvent(record!).data.pipeline_id, 'status pipeline_id is the one webhook events carry');
  t.same(d.orchestrator_info, { address: 'local', url: PUBLIC_URL });
  t.notOk('last_state_update_time' in d, 'no state timestamp when OFFLINE');
  for (const k of ['start_time', 'last_params_update_time', 'last_input_time', 'last_output_time', 'last_restart_time']) t.notOk(k in d.inference_status, `no ${k} when OFFLINE`);
  t.same(d.inference_status.last_params, s.params, 'last params are the stored ones');
  t.match(d.inference_status.last_params_hash, /^[0-9a-f]{32}$/, 'md5 hex');
  t.match(d.inference_status, { pipeline: 'streamdiffusion', input_fps: 0, output_fps: 0, restart_count: 0, last_restart_logs: [], last_error: '', stream_id: s.id });
  t.same(d.gateway_status, { whep_url: s.output_stream_url, ingest_metrics: { stats: { peer_conn_stats: { ID: '', BytesReceived: 0, BytesSent: 0 }, conn_quality: 'unknown', track_stats: [] } } });

  await a.app.inject({ method: 'PATCH', url: `/v1/streams/${s.id}`, headers: h, payload: { params: { prompt: 'a dog' } } });
  const after = (await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}/status`, headers: h })).json().data;
  t.not(after.inference_status.last_params_hash, d.inference_status.last_params_hash, 'the hash follows the params');
});

t.test('DELETE /v1/streams?id= and DELETE /v1/streams/{id} answer { success, data: {} }; deleted streams are gone', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const one = (await create(a, h, {})).body;
  const two = (await create(a, h, {})).body;
  let res = await a.app.inject({ method: 'DELETE', url: `/v1/streams?id=${one.id}`, headers: h });
  t.equal(res.statusCode, 200);
  t.same(res.json(), { success: true, data: {} });
  res = await a.app.inject({ method: 'DELETE', url: `/v1/streams/${two.id}`, headers: h });
  t.same(res.json(), { success: true, data: {} });
  t.equal((await a.app.inject({ method: 'GET', url: `/v1/streams/${one.id}`, headers: h })).statusCode, 404, 'GET after delete → 404');
  t.equal((await a.app.inject({ method: 'DELETE', url: `/v1/streams/${one.id}`, headers: h })).statusCode, 404, 'a second delete → 404');
  t.same((await a.app.inject({ method: 'GET', url: '/v1/streams', headers: h })).json().data, [], 'not listed');
  res = await a.app.inject({ method: 'DELETE', url: '/v1/streams', headers: h });
  t.equal(res.statusCode, 400, 'DELETE /v1/streams without id');
  t.same(fieldsOf(res.json()), ['id']);
  const rec = await a.store.streams.get(one.id);
  t.equal(rec?.deleted, true, 'kept, flagged deleted');
  t.equal(rec?.state, 'created', 'a stream that never started emits nothing and stays created');
  const ingest = await a.service.resolveIngest(one.id, one.stream_key);
  t.equal(ingest, null, 'a deleted stream cannot be published to');
});

t.test('after DELETE, GET /v1/streams/{id}/status reads OFFLINE with end_reason deleted for DELETED_STREAM_STATUS_TTL, then 404; the other routes are 404 at once', { timeout: 30_000 }, async (t) => {
  let nowMs = Date.now();
  const a = await makeStreamApp(t, { now: () => nowMs, env: { DELETED_STREAM_STATUS_TTL: '600' } });
  const h = await a.auth();
  const stranger = await a.auth();
  const s = (await create(a, h, { params: { prompt: 'a cat' } })).body;
  // A stream whose session was live (started) and one that never started: both end as deleted.
  const started = (await create(a, h, {})).body;
  await a.store.streams.update(started.id, { state: 'started', startedAt: new Date(nowMs - 60_000).toISOString(), lastLiveAt: new Date(nowMs).toISOString() });
  for (const id of [s.id, started.id]) {
    const del = await a.app.inject({ method: 'DELETE', url: `/v1/streams/${id}`, headers: h });
    t.equal(del.statusCode, 200);
  }
  t.equal((await a.store.streams.get(started.id))?.endReason, 'deleted', 'the live session ended with reason deleted');

  const status = async (id: string, headers = h) => a.app.inject({ method: 'GET', url: `/v1/streams/${id}/status`, headers });
  for (const id of [s.id, started.id]) {
    const res = await status(id);
    t.equal(res.statusCode, 200, 'status right after DELETE answers');
    const body = res.json();
    t.equal(body.success, true);
    t.equal(body.error, null);
    t.match(body.data, { stream_id: id, state: 'OFFLINE', end_reason: 'deleted', type: 'status' });
    t.notOk('last_state_update_time' in body.data, 'no state timestamp when OFFLINE');
    t.notOk('viewers' in body.data, 'no live values');
    t.match(body.data.inference_status, { input_fps: 0, output_fps: 0, stream_id: id });
  }
  const res = (await status(s.id)).json().data;
  t.same(res.inference_status.last_params, s.params, 'the params it had');
  t.equal(res.gateway_status.whep_url, s.output_stream_url);

  const s404 = await status(s.id, stranger);
  t.equal(s404.statusCode, 404, "another account's deleted stream stays unknown");
  t.equal(s404.json().code, 'STREAMS/NOT_FOUND');
  const others: [string, string, Json?][] = [
    ['GET', `/v1/streams/${s.id}`],
    ['PATCH', `/v1/streams/${s.id}`, { params: { prompt: 'x' } }],
    ['POST', `/beta/streams/${s.id}/prompts`, { pipeline: 'live-video-to-video', model_id: 'streamdiffusion', params: { prompt: 'x' } }],
    ['DELETE', `/v1/streams/${s.id}`],
    ['DELETE', `/v1/streams?id=${s.id}`],
  ];
  for (const [method, url, payload] of others) {
    const r = await a.app.inject({ method: method as 'GET', url, headers: h, ...(payload ? { payload } : {}) });
    t.equal(r.statusCode, 404, `${method} ${url.replace(s.id, '{id}')} of a deleted stream`);
    t.equal(r.json().code, 'STREAMS/NOT_FOUND');
  }

  nowMs += 599_000;
  t.equal((await status(s.id)).json().data?.state, 'OFFLINE', 'still OFFLINE 599 s after DELETE');
  nowMs += 1_000;
  const late = await status(s.id);
  t.equal(late.statusCode, 404, '404 once DELETED_STREAM_STATUS_TTL (600 s) has passed');
  t.match(late.json(), { success: false, code: 'STREAMS/NOT_FOUND', details: { id: s.id } });
});

t.test('DELETED_STREAM_STATUS_TTL=0 makes status 404 at once after DELETE; a stream that ended by timeout reads OFFLINE with its reason', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t, { env: { DELETED_STREAM_STATUS_TTL: '0' } });
  const h = await a.auth();
  const s = (await create(a, h, {})).body;
  const ended = (await create(a, h, {})).body;
  await a.store.streams.update(ended.id, { state: 'ended', endReason: 'timeout', endedAt: new Date().toISOString() });
  t.match((await a.app.inject({ method: 'GET', url: `/v1/streams/${ended.id}/status`, headers: h })).json().data, { state: 'OFFLINE', end_reason: 'timeout' });
  const fresh = (await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}/status`, headers: h })).json().data;
  t.notOk('end_reason' in fresh, 'a stream that never ended has no end_reason');
  t.equal((await a.app.inject({ method: 'DELETE', url: `/v1/streams/${s.id}`, headers: h })).statusCode, 200);
  t.equal((await a.app.inject({ method: 'GET', url: `/v1/streams/${s.id}/status`, headers: h })).statusCode, 404);
});

t.test('GET /v1/streams lists newest first, paginated with next_cursor', { timeout: 30_000 }, async (t) => {
  // Streams created in one millisecond have no order but their random ids: the clock steps a
  // second between creations so "newest first" is the only order the test can see.
  let clock = Date.now();
  const a = await makeStreamApp(t, { now: () => clock });
  const h = await a.auth();
  for (let i = 0; i < 3; i++) {
    clock += 1000;
    t.equal((await create(a, h, { name: `s${i}` })).status, 201);
  }
  const page1 = (await a.app.inject({ method: 'GET', url: '/v1/streams?limit=2', headers: h })).json();
  t.equal(page1.success, true);
  t.same(page1.data.map((s: Json) => s.name), ['s2', 's1']);
  t.type(page1.next_cursor, 'string');
  const page2 = (await a.app.inject({ method: 'GET', url: `/v1/streams?limit=2&cursor=${encodeURIComponent(page1.next_cursor)}`, headers: h })).json();
  t.same(page2.data.map((s: Json) => s.name), ['s0']);
  t.equal(page2.next_cursor, null);
  t.same(Object.keys(page2.data[0]).sort(), Object.keys(page1.data[0]).sort(), 'list items are full Stream records');
  const bad = await a.app.inject({ method: 'GET', url: '/v1/streams?cursor=zzz', headers: h });
  t.equal(bad.statusCode, 400);
  t.equal((await a.app.inject({ method: 'GET', url: '/v1/streams?limit=101', headers: h })).statusCode, 400, 'limit is 1–100');
});

t.test('placement: a model no node has is 422 MODEL_UNAVAILABLE; full nodes are 503 NO_CAPACITY', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t, { models: ['stabilityai/sd-turbo'] });
  const h = await a.auth();
  t.equal((await create(a, h, { params: { model_id: 'stabilityai/sd-turbo' } })).status, 201);
  const missing = await create(a, h, { params: { model_id: 'stabilityai/sdxl-turbo' } });
  t.equal(missing.status, 422);
  t.equal(missing.body.code, 'STREAMS/MODEL_UNAVAILABLE');
  t.same(missing.body.details, { model_id: 'stabilityai/sdxl-turbo', available: ['stabilityai/sd-turbo'] });

  const full = await makeStreamApp(t, { capacity: 0 });
  const res = await create(full, await full.auth(), {});
  t.equal(res.status, 503);
  t.equal(res.body.code, 'STREAMS/NO_CAPACITY');
  t.equal(res.headers['retry-after'], '30');
});

t.test('the OpenAPI document describes every stream route', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const doc = (await a.app.inject({ method: 'GET', url: '/openapi.json' })).json();
  for (const [path, method] of [
    ['/v1/streams', 'post'],
    ['/v1/streams', 'get'],
    ['/v1/streams', 'delete'],
    ['/v1/streams/{id}', 'get'],
    ['/v1/streams/{id}', 'patch'],
    ['/v1/streams/{id}', 'delete'],
    ['/v1/streams/{id}/status', 'get'],
    ['/beta/streams/{id}/prompts', 'post'],
  ] as const) {
    t.ok(doc.paths?.[path]?.[method], `${method.toUpperCase()} ${path}`);
  }
  t.ok(doc.components?.schemas?.StreamParams, 'StreamParams schema');
});

t.test('free-form params nested thousands deep or oversized are refused naming the field, on create, PATCH and the beta route', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  // Built as text: an object this deep would overflow JSON.stringify here before it reached the server.
  const deep = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
  const body = (where: 'controlnet' | 'processor', inner: string) =>
    where === 'controlnet'
      ? `{"params":{"controlnets":[{"model_id":"thibaud/controlnet-sd21-canny-diffusers","preprocessor":"canny","preprocessor_params":${inner}}]}}`
      : `{"params":{"image_postprocessing":{"processors":[{"type":"sharpen","params":${inner}}]}}}`;
  const json = { 'content-type': 'application/json', ...h };
  const created = await a.app.inject({ method: 'POST', url: '/v1/streams', headers: h, payload: { params: { prompt: 'x' } } });
  const id = created.json().id as string;
  for (const where of ['controlnet', 'processor'] as const) {
    for (const [what, inner] of [
      ['5 000 levels deep', deep(5_000)],
      ['5 levels deep', deep(5)],
      ['300 values', JSON.stringify(Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, i])))],
      ['9 000 characters', JSON.stringify({ note: 'x'.repeat(9_000) })],
    ] as const) {
      for (const [method, url, payload] of [
        ['POST', '/v1/streams', body(where, inner)],
        ['PATCH', `/v1/streams/${id}`, body(where, inner)],
        ['POST', `/beta/streams/${id}/prompts`, body(where, inner).replace(/^\{/, '{"pipeline":"live-video-to-video","model_id":"streamdiffusion",')],
      ] as const) {
        const res = await a.app.inject({ method, url, headers: json, payload });
        t.equal(res.statusCode, 400, `${where} params ${what}: ${method} ${url.split('/').slice(0, 3).join('/')} → 400`);
        t.match(JSON.stringify(res.json().details), where === 'controlnet' ? /preprocessor_params/ : /processors\.0\.params|processors\[0\]\.params/, 'names the field');
      }
    }
  }
  const fine = await a.app.inject({ method: 'PATCH', url: `/v1/streams/${id}`, headers: json, payload: body('controlnet', '{"low_threshold":100,"high_threshold":200}') });
  t.equal(fine.statusCode, 200, 'ordinary preprocessor_params still pass');
});

t.test('output_rtmp_url must point at a public address: literals, names and hidden characters are checked', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  for (const url of [
    'rtmp://127.0.0.1:1935/live/x',
    'rtmp://169.254.169.254/latest/meta',
    'rtmp://[::1]:6379/app/x',
    'rtmps://10.0.0.1/app/x',
    'rtmp://[::ffff:127.0.0.1]/app/x',
    'rtmp://localhost/app/x',
    'rtmp://metadata.internal/app/x',
    'rtmp://cdn.rebind.example.com/app/x',
    'rtmp://nowhere.invalid/app/x',
    'rtmp://live.example.com/app/ke y',
    'rtmp://live.example.com/app/key\r\nX: 1',
    'rtmp://live.example.com/app/key\u0000',
  ]) {
    const res = await create(a, h, { output_rtmp_url: url });
    t.equal(res.status, 400, `${JSON.stringify(url)} refused`);
    t.same(fieldsOf(res.body), ['output_rtmp_url'], 'naming the field');
  }
  const ok = await create(a, h, { output_rtmp_url: 'rtmp://live.example.com/app/sk_1' });
  t.equal(ok.status, 201, 'a public target is accepted');
});

t.test('processor chains whose upscalers exceed 2048 px per side are refused naming the block', { timeout: 30_000 }, async (t) => {
  const a = await makeStreamApp(t);
  const h = await a.auth();
  const up = (n: number, f = 4) => ({ processors: Array.from({ length: n }, () => ({ type: 'upscale', params: { scale_factor: f } })) });
  const sixteen = await create(a, h, { params: { width: 512, height: 512, image_postprocessing: up(16) } });
  t.equal(sixteen.status, 400, 'sixteen ×4 upscalers');
  t.same(fieldsOf(sixteen.body), ['params.image_postprocessing']);
  const pre = await create(a, h, { params: { width: 1024, height: 512, image_preprocessing: up(1, 4) } });
  t.equal(pre.status, 400, '1024 × 4 in preprocessing');
  t.same(fieldsOf(pre.body), ['params.image_preprocessing']);
  t.equal((await create(a, h, { params: { width: 512, height: 512, image_postprocessing: up(1, 4) } })).status, 201, '512 × 4 = 2048 is allowed');
});

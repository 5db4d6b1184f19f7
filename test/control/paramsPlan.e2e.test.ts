/**
 * One plan: for every key of the stream params, what PATCH answers (`x-params-update`) is what
 * the engine does with the same change: a real FramePipeline on demo models applies it hot, or
 * reloads (its restart count rises by one). Both start from the same params and take the same
 * changes in the same order.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { buildTinyLora, buildTinyModel, createFramePipeline, demoModelOptions } from '../../native/index.ts';
import { DEFAULT_PARAMS, type ParamsPatch } from '../../native/params/index.ts';
import { makeStreamApp } from './streamApp.ts';

const CANNY = 'lllyasviel/control_v11p_sd15_canny';
const BASE: ParamsPatch = { model_id: 'Lykon/dreamshaper-8', width: 384, height: 384, acceleration: 'none', use_safety_checker: false, t_index_list: [20] };

/** One change per key (several for the keys with a rule of their own), each valid for the API. */
const CHANGES: [key: string, patch: ParamsPatch][] = [
  ['prompt', { prompt: 'a cat' }],
  ['prompt_interpolation_method', { prompt_interpolation_method: 'linear' }],
  ['normalize_prompt_weights', { normalize_prompt_weights: false }],
  ['normalize_seed_weights', { normalize_seed_weights: false }],
  ['negative_prompt', { negative_prompt: 'dull' }],
  ['guidance_scale', { guidance_scale: 1.2 }],
  ['delta', { delta: 0.5 }],
  ['num_inference_steps', { num_inference_steps: 40 }],
  ['t_index_list', { t_index_list: [10, 20] }],
  ['use_safety_checker', { use_safety_checker: true }],
  ['safety_checker_threshold', { safety_checker_threshold: 0.3 }],
  ['width', { width: 448 }],
  ['height', { height: 448 }],
  ['lora_dict', { lora_dict: { 'style/tiny': 0.5 } }],
  ['use_lcm_lora', { use_lcm_lora: false }],
  ['lcm_lora_id', { lcm_lora_id: 'latent-consistency/lcm-lora-sdxl' }],
  ['acceleration', { acceleration: 'xformers' }],
  ['use_denoising_batch', { use_denoising_batch: false }],
  ['do_add_noise', { do_add_noise: false }],
  ['seed', { seed: 42 }],
  ['seed_interpolation_method', { seed_interpolation_method: 'slerp' }],
  ['enable_similar_image_filter', { enable_similar_image_filter: true }],
  ['similar_image_filter_threshold', { similar_image_filter_threshold: 0.9 }],
  ['similar_image_filter_max_skip_frame', { similar_image_filter_max_skip_frame: 5 }],
  ['skip_diffusion', { skip_diffusion: true }],
  ['skip_diffusion', { skip_diffusion: false }],
  ['image_preprocessing', { image_preprocessing: { processors: [{ type: 'blur' }] } }],
  ['image_postprocessing', { image_postprocessing: { processors: [{ type: 'sharpen' }] } }],
  ['image_postprocessing', { image_postprocessing: { processors: [{ type: 'upscale', params: { scale_factor: 2 } }] } }],
  ['latent_preprocessing', { latent_preprocessing: { processors: [{ type: 'latent_feedback' }] } }],
  ['latent_postprocessing', { latent_postprocessing: { processors: [{ type: 'latent_feedback' }] } }],
  ['controlnets', { controlnets: [{ model_id: CANNY, preprocessor: 'canny' }] }],
  ['controlnets', { controlnets: [{ model_id: CANNY, preprocessor: 'canny', conditioning_scale: 0.4 }] }],
  ['ip_adapter', { ip_adapter: { scale: 0.5 } }],
  ['ip_adapter_style_image_url', { ip_adapter_style_image_url: 'https://style.example.test/s.png' }],
  ['model_id', { model_id: 'prompthero/openjourney-v4' }],
];

t.test('for every key, the API’s hot/reload answer is what the engine did', { timeout: 600_000 }, async (t) => {
  t.same([...new Set(CHANGES.map(([k]) => k))].sort(), Object.keys(DEFAULT_PARAMS).sort(), 'every key of the params is exercised');
  const dir = mkdtempSync(join(tmpdir(), 'rv-plan-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const id of ['Lykon/dreamshaper-8', 'prompthero/openjourney-v4']) buildTinyModel(dir, id, demoModelOptions(id));
  buildTinyLora(dir, 'style/tiny');
  const engine = await createFramePipeline({ modelsDir: dir, params: BASE, logger: pino({ level: 'silent' }) });
  t.teardown(() => engine.close());

  const a = await makeStreamApp(t);
  const h = await a.auth('internal');
  const created = await a.app.inject({ method: 'POST', url: '/v1/streams', headers: h, payload: { params: BASE } });
  t.equal(created.statusCode, 201, 'created');
  const id = created.json<{ id: string }>().id;

  for (const [key, patch] of CHANGES) {
    const res = await a.app.inject({ method: 'PATCH', url: `/v1/streams/${id}`, headers: h, payload: { params: patch } });
    t.equal(res.statusCode, 200, `${key}: PATCH → 200 (${res.statusCode === 200 ? '' : res.body})`);
    const api = res.headers['x-params-update'];
    const before = engine.status().restartCount;
    const plan = engine.update(patch);
    await engine.whenIdle();
    const did = engine.status().restartCount - before === 1 ? 'reload' : 'hot';
    t.equal(plan.reload.length > 0 ? 'reload' : 'hot', did, `${key}: the engine did what its plan said (${did})`);
    t.equal(api, did, `${key}: the API answered ${String(api)}, the engine did ${did}`);
  }
});

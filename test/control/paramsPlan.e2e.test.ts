/**
 * One plan: for every key of the stream params, what PATCH answers (`x-params-update`) is what
 * the engine does with the same change.
 *
 * 1. No publisher (the API plans, `x-params-update-by: api`): a standalone FramePipeline on demo
 *    models, started from the same params and taking the same changes in the same order, applies
 *    each hot or reloads (its restart count rises by one) as the API said.
 * 2. A live stream (a real server on demo models, a real WHIP publisher): the stream's own engine
 *    plans each PATCH (`x-params-update-by: node`), the answer is the params module's plan over the
 *    stored params (no drift between the API and the engine), and the engine's restart count, read
 *    from the node and from the status endpoint, is the number of `reload` answers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { wrtcPublish } from '../media/wrtcPeers.ts';
import t from 'tap';
import { buildTinyLora, buildTinyModel, createFramePipeline, demoModelOptions } from '../../native/index.ts';
import { DEFAULT_PARAMS, mergeParams, planChange, planUpdate, type ParamsPatch, type StreamParams } from '../../native/params/index.ts';
import { startRolesServer } from '../helpers/rolesServer.ts';
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
    const plan = engine.update(planChange(engine.params, patch));
    await engine.whenIdle();
    const did = engine.status().restartCount - before === 1 ? 'reload' : 'hot';
    t.equal(plan.reload.length > 0 ? 'reload' : 'hot', did, `${key}: the engine did what its plan said (${did})`);
    t.equal(api, did, `${key}: the API answered ${String(api)}, the engine did ${did}`);
    t.equal(res.headers['x-params-update-by'], 'api', `${key}: no publisher, so no engine runs the stream: the API planned it`);
  }
});


/** Polls `probe` every 100 ms until it returns a value, for at most `ms`. */
async function until<T>(what: string, ms: number, probe: () => T | null | undefined | Promise<T | null | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== null && v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

t.test('on a live stream, the answer is the plan its engine ran, for every key', { timeout: 600_000 }, async (t) => {
  // The LoRA the lora_dict change names, beside the demo models the node prepares at start.
  const { api, roles } = await startRolesServer(t, { prepare: (config) => buildTinyLora(config.modelsDir, 'style/tiny') });
  const created = await api('POST', '/v1/streams', { params: BASE });
  t.equal(created.status, 201, 'created');
  const s = created.body;
  t.equal((await wrtcPublish(t, s['whip_url'], [200, 120, 60], s['stream_key'])).status, 201, 'WHIP publish accepted');
  const engine = () => roles.node!.getStream(s['id'])?.status().pipeline as { restartCount: number; state: string } | null | undefined;
  await until('the stream’s engine running', 120_000, () => engine());

  let stored: StreamParams = mergeParams(null, BASE);
  let reloads = 0;
  for (const [key, patch] of CHANGES) {
    const res = await api('PATCH', `/v1/streams/${s['id']}`, { params: patch });
    t.equal(res.status, 200, `${key}: PATCH → 200 (${res.status === 200 ? '' : JSON.stringify(res.body)})`);
    const answer = res.headers.get('x-params-update');
    t.equal(res.headers.get('x-params-update-by'), 'node', `${key}: the stream's engine planned it`);
    const next = mergeParams(stored, patch);
    t.equal(answer, planUpdate(stored, next).mode, `${key}: the engine's plan is the params module's over the stored params (${String(answer)})`);
    stored = next;
    if (answer === 'reload') {
      reloads++;
      // The new pipeline builds beside the serving one; the count rises once the build is done.
      await until(`${key}: the engine's reload`, 120_000, () => {
        const e = engine();
        return e && e.restartCount >= reloads && e.state !== 'reloading' ? e : null;
      });
    }
    // A hot change starts no reload: the count is still the number of reload answers.
    t.equal(engine()?.restartCount, reloads, `${key}: the engine reloaded ${reloads} times, as answered`);
  }
  const st = (await api('GET', `/v1/streams/${s['id']}/status`)).body['data'];
  t.equal(st.inference_status.restart_count, reloads, `status restart_count is the engine's (${reloads})`);
  t.ok(reloads > 0 && reloads < CHANGES.length, `some changes reloaded, some were hot (${reloads} of ${CHANGES.length})`);
});

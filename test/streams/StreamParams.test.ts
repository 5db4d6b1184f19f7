/**
 * Params merging, hot/reload classification (spec PATCH list, ai-runner details), the params hash,
 * and the runner-state rules of the status endpoint (reference §2.5).
 */
import t from 'tap';
import type { NodeStreamStatus } from '../../streams/MediaNodeClient.ts';
import { planUpdate, DEFAULT_PARAMS, mergeParams, paramsHash, stableJson, type StreamParams } from '../../streams/StreamParams.ts';
import { runnerState } from '../../streams/StreamStatusView.ts';

const base = (over: Partial<StreamParams> = {}): StreamParams => mergeParams(null, { model_id: 'Lykon/dreamshaper-8', ...over } as never);

t.test('the spec hot list and ai-runner\'s dynamic details are hot; every other key reloads', async (t) => {
  const hot: [string, Partial<StreamParams>][] = [
    ['prompt', { prompt: 'x' }],
    ['negative_prompt', { negative_prompt: 'x' }],
    ['guidance_scale', { guidance_scale: 2 }],
    ['delta', { delta: 0.2 }],
    ['num_inference_steps', { num_inference_steps: 60 }],
    ['t_index_list', { t_index_list: [1, 2] }],
    ['seed', { seed: [[1, 1]] }],
    ['ip_adapter_style_image_url', { ip_adapter_style_image_url: 'https://x.example/a.png' }],
    ['prompt_interpolation_method', { prompt_interpolation_method: 'linear' }],
    ['use_safety_checker', { use_safety_checker: false }],
    ['safety_checker_threshold', { safety_checker_threshold: 0.2 }],
    ['image_preprocessing', { image_preprocessing: { enabled: true, processors: [{ type: 'blur', enabled: true, params: {} }] } }],
    ['image_postprocessing', { image_postprocessing: { enabled: true, processors: [{ type: 'sharpen', enabled: true, params: {} }] } }],
  ];
  for (const [key, patch] of hot) t.same(planUpdate(base(), mergeParams(base(), patch as never)), { mode: 'hot', hot: [key], reload: [] }, `${key} is hot`);
  const reload: [string, Partial<StreamParams>][] = [
    ['model_id', { model_id: 'prompthero/openjourney-v4' }],
    ['width', { width: 640 }],
    ['acceleration', { acceleration: 'none' }],
    ['do_add_noise', { do_add_noise: false }],
    ['skip_diffusion', { skip_diffusion: true }],
    ['image_postprocessing', { image_postprocessing: { enabled: true, processors: [{ type: 'upscale', enabled: true, params: { scale_factor: 2 } }] } }],
    ['image_postprocessing', { image_postprocessing: { enabled: true, processors: [{ type: 'realesrgan_trt', enabled: true, params: {} }] } }],
  ];
  for (const [key, patch] of reload) t.same(planUpdate(base(), mergeParams(base(), patch as never)).reload, [key], `${key} reloads`);
  t.same(planUpdate(base(), mergeParams(base(), { prompt: 'x', width: 640 })), { mode: 'reload', hot: ['prompt'], reload: ['width'] }, 'one reload key makes the update a reload');
  t.same(planUpdate(base(), base()), { mode: 'none', hot: [], reload: [] });
});

t.test('ControlNets: only a conditioning_scale change on the same list is hot; IP-Adapter: every change is hot', async (t) => {
  const cn = base({ controlnets: [{ model_id: 'lllyasviel/control_v11f1p_sd15_depth' }] as never });
  t.equal(planUpdate(cn, mergeParams(cn, { controlnets: [{ model_id: 'lllyasviel/control_v11f1p_sd15_depth', conditioning_scale: 0.3 }] })).mode, 'hot');
  t.equal(planUpdate(cn, mergeParams(cn, { controlnets: [{ model_id: 'lllyasviel/control_v11f1p_sd15_depth', enabled: false }] })).mode, 'reload', 'enabled is not the scale');
  t.equal(planUpdate(cn, mergeParams(cn, { controlnets: [{ model_id: 'lllyasviel/control_v11f1p_sd15_depth' }, { model_id: 'lllyasviel/control_v11p_sd15_canny' }] })).mode, 'reload', 'adding reloads');
  const ip = base({ ip_adapter: { scale: 1 } as never });
  t.equal(planUpdate(ip, mergeParams(ip, { ip_adapter: { scale: 0.2, enabled: false, weight_type: 'ease in' } })).mode, 'hot');
  t.equal(planUpdate(ip, mergeParams(ip, { ip_adapter: { type: 'faceid' } })).mode, 'hot', 'a type change is hot');
  t.equal(planUpdate(base(), ip).mode, 'hot', 'adding it is hot (spec: fully hot-swappable)');
  t.equal(planUpdate(ip, mergeParams(ip, { ip_adapter: null })).mode, 'hot', 'removing it is hot');
});

t.test('mergeParams fills defaults, replaces arrays whole and resets null fields', async (t) => {
  const p = mergeParams(null, {});
  t.same(p, DEFAULT_PARAMS);
  t.not(p.t_index_list, DEFAULT_PARAMS.t_index_list, 'defaults are copied, never shared');
  const q = mergeParams(mergeParams(null, { lora_dict: { a: 1 }, t_index_list: [1, 2, 3] }), { lora_dict: null, t_index_list: [4] });
  t.equal(q.lora_dict, null);
  t.same(q.t_index_list, [4]);
});

t.test('the params hash is md5 of the key-sorted JSON: order-independent, value-sensitive', async (t) => {
  t.equal(stableJson({ b: 1, a: { d: [2, { z: 1, y: 2 }], c: 3 } }), '{"a":{"c":3,"d":[2,{"y":2,"z":1}]},"b":1}');
  t.equal(paramsHash({ a: 1, b: 2 }), paramsHash({ b: 2, a: 1 }));
  t.not(paramsHash({ a: 1 }), paramsHash({ a: 2 }));
  t.match(paramsHash({}), /^[0-9a-f]{32}$/);
});

t.test('runner states follow ai-runner rules', async (t) => {
  const now = 1_000_000;
  const live = (over: Partial<NodeStreamStatus> = {}): NodeStreamStatus => ({
    streamId: 's', state: 'live', startTime: now - 60_000, lastInputTime: now - 10, lastOutputTime: now - 10, inputFps: 30, outputFps: 30,
    lastParams: {}, lastParamsUpdateTime: null, restartCount: 0, lastRestartTime: null, lastRestartLogs: [], lastError: null, lastErrorTime: null, ingest: null, viewers: 0, ...over,
  });
  t.equal(runnerState(live(), now), 'ONLINE');
  t.equal(runnerState(live({ state: 'idle' }), now), 'OFFLINE');
  t.equal(runnerState(live({ state: 'connecting', lastOutputTime: null }), now), 'LOADING');
  t.equal(runnerState(live({ state: 'connecting', lastOutputTime: null, lastInputTime: now - 181_000, startTime: null }), now), 'ERROR', 'loading over 180 s');
  t.equal(runnerState(live({ inputFps: 14 }), now), 'DEGRADED_INPUT', 'input below 15 fps');
  t.equal(runnerState(live({ lastInputTime: now - 2_500 }), now), 'DEGRADED_INPUT', 'no input for 2 s');
  t.equal(runnerState(live({ outputFps: 9 }), now), 'DEGRADED_INFERENCE', 'output below min(10, 0.8 × input)');
  t.equal(runnerState(live({ inputFps: 30, outputFps: 10 }), now), 'ONLINE', '10 fps out is min(10, 24): enough');
  t.equal(runnerState(live({ lastOutputTime: now - 2_500 }), now), 'DEGRADED_INFERENCE', 'no output for 2 s');
  t.equal(runnerState(live({ lastRestartTime: now - 59_000 }), now), 'DEGRADED_INFERENCE', 'a restart in the last 60 s');
  t.equal(runnerState(live({ lastRestartTime: now - 61_000 }), now), 'ONLINE');
  t.equal(runnerState(live({ lastErrorTime: now - 14_000, lastError: 'x' }), now), 'DEGRADED_INFERENCE', 'an error in the last 15 s');
});

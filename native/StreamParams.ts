/**
 * The engine's view of Daydream's StreamDiffusion params (ai-runner `params.py`,
 * reference/live-diffusion.md §2.2) and the hot-vs-reload contract (§2.4). The API validates the
 * public schema; the engine re-checks only what would make the math wrong.
 */
import type { Acceleration } from './ModelSessions.ts';
import type { InterpolationMethod } from './Blend.ts';
import type { ProcessingBlock } from './processors/ProcessorChain.ts';
import { InvalidParamsError, UnsupportedProcessorError } from './errors.ts';
import { CONTROLNET_PREPROCESSORS, controlNetsFor, familyOf, MAX_ENABLED_CONTROLNETS, REFUSED_CONTROLNETS, supportsIpAdapter } from './ModelFamilies.ts';

/**
 * RCFG mode (engine setting, not in Daydream's public schema; upstream default 'self'):
 * 'none' = no guidance; 'full' = real CFG (2× batch); 'self' = residual self-negative (no extra
 * slots); 'initialize' = one extra slot evaluating the negative prompt for the first step.
 * All are inactive when guidance_scale ≤ 1.
 */
export type CfgType = 'none' | 'full' | 'self' | 'initialize';

export interface ControlNetParams {
  model_id: string;
  conditioning_scale: number;
  enabled?: boolean;
  preprocessor?: string;
  preprocessor_params?: Record<string, unknown>;
  [k: string]: unknown;
}

export interface StreamParams {
  model_id: string;
  /** A prompt or a weighted list `[[prompt, weight], …]`. */
  prompt: string | [string, number][];
  prompt_interpolation_method: InterpolationMethod;
  normalize_prompt_weights: boolean;
  negative_prompt: string;
  guidance_scale: number;
  delta: number;
  /** 1–100; grid of the LCM scheduler. */
  num_inference_steps: number;
  /** 1–4 non-decreasing indices into the grid; length = Stream Batch size. */
  t_index_list: number[];
  /** Pixels; 384–1024, multiple of 64 in Daydream's schema. */
  width: number;
  height: number;
  lora_dict: Record<string, number> | null;
  use_lcm_lora: boolean;
  lcm_lora_id: string;
  acceleration: Acceleration;
  use_safety_checker: boolean;
  safety_checker_threshold: number;
  use_denoising_batch: boolean;
  do_add_noise: boolean;
  skip_diffusion: boolean;
  /** A seed or a weighted list `[[seed, weight], …]`. */
  seed: number | [number, number][];
  seed_interpolation_method: InterpolationMethod;
  normalize_seed_weights: boolean;
  enable_similar_image_filter: boolean;
  similar_image_filter_threshold: number;
  similar_image_filter_max_skip_frame: number;
  controlnets: ControlNetParams[];
  ip_adapter: Record<string, unknown> | null;
  ip_adapter_style_image_url: string | null;
  image_preprocessing: ProcessingBlock | null;
  image_postprocessing: ProcessingBlock | null;
  latent_preprocessing: ProcessingBlock | null;
  latent_postprocessing: ProcessingBlock | null;
  cached_attention: { enabled: boolean; max_frames?: number; interval?: number } | null;
  cfg_type: CfgType;
}

/** ai-runner defaults (sd-turbo). */
export const DEFAULT_STREAM_PARAMS: Readonly<StreamParams> = Object.freeze({
  model_id: 'stabilityai/sd-turbo',
  prompt: 'flowers',
  prompt_interpolation_method: 'slerp',
  normalize_prompt_weights: true,
  negative_prompt: 'blurry, low quality, flat, 2d',
  guidance_scale: 1.0,
  delta: 0.7,
  num_inference_steps: 50,
  t_index_list: [12, 20, 32],
  width: 512,
  height: 512,
  lora_dict: null,
  use_lcm_lora: true,
  lcm_lora_id: 'latent-consistency/lcm-lora-sdv1-5',
  acceleration: 'tensorrt',
  use_safety_checker: true,
  safety_checker_threshold: 0.5,
  use_denoising_batch: true,
  do_add_noise: true,
  skip_diffusion: false,
  seed: 789,
  seed_interpolation_method: 'linear',
  normalize_seed_weights: true,
  enable_similar_image_filter: false,
  similar_image_filter_threshold: 0.98,
  similar_image_filter_max_skip_frame: 10,
  controlnets: [],
  ip_adapter: null,
  ip_adapter_style_image_url: null,
  image_preprocessing: null,
  image_postprocessing: null,
  latent_preprocessing: null,
  latent_postprocessing: null,
  cached_attention: null,
  cfg_type: 'self',
});

/** Keys applied on the next frame without a reload (ai-runner `_update_params_dynamic`). */
export const HOT_KEYS: ReadonlySet<keyof StreamParams> = new Set<keyof StreamParams>([
  'prompt',
  'prompt_interpolation_method',
  'normalize_prompt_weights',
  'negative_prompt',
  'num_inference_steps',
  'guidance_scale',
  'delta',
  't_index_list',
  'seed',
  'seed_interpolation_method',
  'normalize_seed_weights',
  'use_safety_checker',
  'safety_checker_threshold',
  'image_preprocessing',
  'image_postprocessing',
  'latent_preprocessing',
  'latent_postprocessing',
  // Spec: IP-Adapter is "fully hot-swappable": adding, removing (null), enabling, scale, type,
  // weight_type. Models that support it keep the image encoder loaded (LocalPipeline).
  'ip_adapter',
  'ip_adapter_style_image_url',
  'cfg_type',
]);

/** Merges a partial update over a base (arrays and objects are replaced, not merged). */
export function mergeParams(base: StreamParams, patch: Partial<StreamParams>): StreamParams {
  const out = { ...base };
  for (const [k, v] of Object.entries(patch)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}

/** Keys whose values differ (structural comparison). */
export function changedKeys(a: StreamParams, b: StreamParams): (keyof StreamParams)[] {
  return (Object.keys(b) as (keyof StreamParams)[]).filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
}

/** Output scale of a post-processing block (upscale factors multiply). */
function outputScale(block: ProcessingBlock | null): number {
  if (!block || block.enabled === false) return 1;
  return block.processors
    .filter((p) => p.enabled !== false && p.type === 'upscale')
    .reduce((s, p) => s * Number(p.params?.scale_factor ?? p.params?.scale ?? 2), 1);
}

/**
 * Splits changed keys into hot and reload, following ai-runner with two refinements from Daydream's
 * docs: ControlNets are hot only when just `conditioning_scale` or `preprocessor_params` changed; image_postprocessing that
 * changes the output size reloads. ip_adapter is hot whatever changes (the spec's "fully
 * hot-swappable").
 */
export function classifyChanges(a: StreamParams, b: StreamParams): { hot: (keyof StreamParams)[]; reload: (keyof StreamParams)[] } {
  const hot: (keyof StreamParams)[] = [];
  const reload: (keyof StreamParams)[] = [];
  for (const k of changedKeys(a, b)) {
    let isHot = HOT_KEYS.has(k);
    if (k === 'controlnets') {
      // conditioning_scale and preprocessor_params are hot; the rest of an entry reloads.
      const strip = (c: ControlNetParams[]) => JSON.stringify(c.map(({ conditioning_scale: _s, preprocessor_params: _p, ...rest }) => rest));
      isHot = a.controlnets.length === b.controlnets.length && strip(a.controlnets) === strip(b.controlnets);
    } else if (k === 'cached_attention') {
      isHot = (a.cached_attention?.enabled ?? false) === (b.cached_attention?.enabled ?? false);
    } else if (k === 'image_postprocessing') {
      isHot = outputScale(a.image_postprocessing) === outputScale(b.image_postprocessing);
    }
    (isHot ? hot : reload).push(k);
  }
  return { hot, reload };
}

/** Engine-side checks (the API's schema does the rest). */
export function checkParams(p: StreamParams): void {
  const n = p.t_index_list.length;
  if (n < 1 || n > 4) throw new InvalidParamsError(`t_index_list needs 1–4 entries (got ${n})`);
  for (let i = 0; i < n; i++) {
    const v = p.t_index_list[i] as number;
    if (!Number.isInteger(v) || v < 0 || v > p.num_inference_steps) throw new InvalidParamsError(`t_index_list[${i}]=${v} not in [0, ${p.num_inference_steps}]`);
    if (i > 0 && v < (p.t_index_list[i - 1] as number)) throw new InvalidParamsError('t_index_list must be non-decreasing');
  }
  // The LCM grid takes N distinct timesteps out of the 1000 training ones (LcmScheduler).
  if (!Number.isInteger(p.num_inference_steps) || p.num_inference_steps < 1 || p.num_inference_steps > 1000) {
    throw new InvalidParamsError(`num_inference_steps ${p.num_inference_steps} not in 1..1000`);
  }
  for (const [k, v] of [['width', p.width], ['height', p.height]] as const) {
    if (!Number.isInteger(v) || v < 64 || v > 2048) throw new InvalidParamsError(`${k} ${v} out of range`);
  }
  const prompts = typeof p.prompt === 'string' ? [p.prompt] : p.prompt;
  if (prompts.length === 0) throw new InvalidParamsError('prompt list is empty');
  const seeds = typeof p.seed === 'number' ? [p.seed] : p.seed;
  if (seeds.length === 0) throw new InvalidParamsError('seed list is empty');
  checkControlNets(p);
  if (p.ip_adapter && p.ip_adapter.enabled !== false && !supportsIpAdapter(p.model_id)) {
    throw new InvalidParamsError(`ip_adapter is not available on ${p.model_id} (family ${familyOf(p.model_id)})`);
  }
  if (p.lora_dict) {
    for (const [path, w] of Object.entries(p.lora_dict)) {
      if (typeof w !== 'number' || !Number.isFinite(w)) throw new InvalidParamsError(`lora_dict[${path}] must be a finite number`);
    }
  }
}

/** ControlNet entries: known for the base model's family, unique, supported preprocessor, within the family's cap. */
function checkControlNets(p: StreamParams): void {
  const allowed = controlNetsFor(p.model_id);
  const seen = new Set<string>();
  for (const [i, c] of p.controlnets.entries()) {
    if (!allowed.includes(c.model_id)) throw new InvalidParamsError(`controlnets[${i}].model_id ${c.model_id} is not allowed on ${p.model_id} (allowed: ${allowed.join(', ')})`);
    if (seen.has(c.model_id)) throw new InvalidParamsError(`controlnets[${i}].model_id ${c.model_id} is listed twice`);
    const refused = REFUSED_CONTROLNETS[c.model_id];
    if (refused && c.enabled !== false) throw new InvalidParamsError(`controlnets[${i}].model_id ${c.model_id}: ${refused}`);
    seen.add(c.model_id);
    if (typeof c.conditioning_scale !== 'number' || !Number.isFinite(c.conditioning_scale)) throw new InvalidParamsError(`controlnets[${i}].conditioning_scale must be a finite number`);
    for (const k of ['control_guidance_start', 'control_guidance_end'] as const) {
      const v = c[k];
      if (v !== undefined && (typeof v !== 'number' || v < 0 || v > 1)) throw new InvalidParamsError(`controlnets[${i}].${k} must be in [0,1]`);
    }
    const pre = c.preprocessor ?? 'passthrough';
    if (!CONTROLNET_PREPROCESSORS.includes(pre)) {
      throw new UnsupportedProcessorError(pre, 'image', CONTROLNET_PREPROCESSORS);
    }
  }
  const fam = familyOf(p.model_id);
  const cap = fam ? MAX_ENABLED_CONTROLNETS[fam] : undefined;
  const enabled = p.controlnets.filter((c) => c.enabled !== false).length;
  if (cap !== undefined && enabled > cap) throw new InvalidParamsError(`${p.model_id} allows at most ${cap} enabled ControlNets (got ${enabled})`);
}

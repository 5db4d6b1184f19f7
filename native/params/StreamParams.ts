/**
 * Daydream's StreamDiffusion params (ai-runner `params.py`, reference/live-diffusion.md §2.2): the
 * one `StreamParams` type every layer uses (the API's zod schema is declared against it, the store
 * keeps it, the media node hands it on, the engine runs it), the defaults, the merge of a patch,
 * and the rules checked on merged params. `checkParams` returns issues: the API answers them, the
 * engine throws the first (assertParams).
 *
 * No heavy imports here: the API validates with this module without loading ONNX Runtime.
 */
import { paramsWork } from './ParamsWork.ts';
import { InvalidParamsError, type NativeError, UnsupportedProcessorError } from '../errors.ts';
// Type-only: erased at run time, so ONNX Runtime stays unloaded.
import type { Acceleration } from '../ModelSessions.ts';
import { createProcessorChain, IMAGE_PROCESSOR_TYPES, LATENT_PROCESSOR_TYPES } from '../processors/ProcessorChain.ts';
import { MAX_FRAME_SIDE } from '../processors/Upscale.ts';
import { CONTROLNET_PREPROCESSORS, DAYDREAM_IMAGE_PROCESSOR_NAMES, isControlNetPreprocessor, isModelPreprocessor, preprocessorRefusal } from '../preprocessors/ControlNetPreprocessors.ts';
import { parsePreprocessorParams } from '../preprocessors/ModelPreprocessor.ts';
import { type AudioMapping, mappingProblems, mappingTargetProblem } from './AudioMapping.ts';
import { controlNetsFor, familyOf, MAX_ENABLED_CONTROLNETS, REFUSED_CONTROLNETS, supportsIpAdapter, type ModelId } from './ModelFamilies.ts';

/** How weighted prompts and seeds are blended. */
export type InterpolationMethod = 'linear' | 'slerp';
export type { Acceleration };

/**
 * RCFG mode (engine setting, not in Daydream's public schema; upstream default 'self'):
 * 'none' = no guidance; 'full' = real CFG (2× batch); 'self' = residual self-negative (no extra
 * slots); 'initialize' = one extra slot evaluating the negative prompt for the first step.
 * All are inactive when guidance_scale ≤ 1.
 */
export type CfgType = 'none' | 'full' | 'self' | 'initialize';

export interface ProcessorParams {
  type: string;
  enabled: boolean;
  params: Record<string, unknown>;
}
export interface ProcessingBlock {
  enabled: boolean;
  processors: ProcessorParams[];
}
export interface ControlNetParams {
  model_id: string;
  /** Typical 0–1; 0 skips the ControlNet's run. Hot. */
  conditioning_scale: number;
  /** Default `passthrough`. */
  preprocessor: string;
  enabled: boolean;
  /** The preprocessor's own settings. Hot. */
  preprocessor_params: Record<string, unknown>;
  /** Fractions of denoising [0,1] between which the control applies. */
  control_guidance_start: number;
  control_guidance_end: number;
}

export const IP_ADAPTER_WEIGHT_TYPES = [
  'linear',
  'ease in',
  'ease out',
  'ease in-out',
  'reverse in-out',
  'weak input',
  'weak output',
  'weak middle',
  'strong middle',
  'style transfer',
  'composition',
  'strong style transfer',
  'style and composition',
  'style transfer precise',
  'composition precise',
] as const;

export interface IpAdapterParams {
  scale: number;
  enabled: boolean;
  type: 'regular' | 'faceid';
  weight_type: (typeof IP_ADAPTER_WEIGHT_TYPES)[number];
}

/** The engine's attention cache (not in Daydream's public schema). */
export interface CachedAttention {
  enabled: boolean;
  max_frames?: number;
  interval?: number;
}

/**
 * The params of a stream, every field present (what is stored, returned and run). `M` is the
 * model vocabulary: the API's four ids (`StreamParams<ModelId>`), or any id the engine can load
 * (demo and custom models).
 */
export interface StreamParams<M extends string = string> {
  model_id: M;
  /** A prompt or a weighted list `[[prompt, weight], …]`. */
  prompt: string | [string, number][];
  prompt_interpolation_method: InterpolationMethod;
  normalize_prompt_weights: boolean;
  normalize_seed_weights: boolean;
  negative_prompt: string;
  guidance_scale: number;
  delta: number;
  /** 1–1000; grid of the LCM scheduler. */
  num_inference_steps: number;
  /** 1–4 non-decreasing indices into the grid; length = Stream Batch size. */
  t_index_list: number[];
  use_safety_checker: boolean;
  safety_checker_threshold: number;
  /** Pixels; the API takes 384–1024, multiples of 64. */
  width: number;
  height: number;
  lora_dict: Record<string, number> | null;
  use_lcm_lora: boolean;
  lcm_lora_id: string;
  acceleration: Acceleration;
  use_denoising_batch: boolean;
  do_add_noise: boolean;
  /** A seed or a weighted list `[[seed, weight], …]`. */
  seed: number | [number, number][];
  seed_interpolation_method: InterpolationMethod;
  enable_similar_image_filter: boolean;
  similar_image_filter_threshold: number;
  similar_image_filter_max_skip_frame: number;
  skip_diffusion: boolean;
  image_preprocessing: ProcessingBlock | null;
  image_postprocessing: ProcessingBlock | null;
  latent_preprocessing: ProcessingBlock | null;
  latent_postprocessing: ProcessingBlock | null;
  controlnets: ControlNetParams[];
  /** null = IP-Adapter off. */
  ip_adapter: IpAdapterParams | null;
  /** null = the runtime's default style image. */
  ip_adapter_style_image_url: string | null;
  /** Engine setting (absent = off); not in the public API. */
  cached_attention?: CachedAttention | null;
  /** Engine setting (absent = `self`); not in the public API. */
  cfg_type?: CfgType;
  /** Params that follow the stream's audio, set by the media node per frame (absent = none; AudioMapping.ts). */
  audio_mappings?: AudioMapping[];
}

type BlockKey = 'image_preprocessing' | 'image_postprocessing' | 'latent_preprocessing' | 'latent_postprocessing';

export interface ProcessingBlockPatch {
  enabled?: boolean | undefined;
  processors: { type: string; enabled?: boolean | undefined; params?: Record<string, unknown> | undefined }[];
}
export type ControlNetPatch = { model_id: string } & { [K in Exclude<keyof ControlNetParams, 'model_id'>]?: ControlNetParams[K] | undefined };
export type IpAdapterPatch = { [K in keyof IpAdapterParams]?: IpAdapterParams[K] | undefined };

/**
 * A change to params: any subset of the fields; sub-objects may leave out what has a default
 * (filled by mergeParams). `null` on a field means "back to the default". The API's input schema
 * is declared to satisfy this type.
 */
export type ParamsPatch<M extends string = string> = {
  [K in keyof StreamParams<M>]?:
    | (K extends BlockKey ? ProcessingBlockPatch : K extends 'controlnets' ? ControlNetPatch[] : K extends 'ip_adapter' ? IpAdapterPatch : StreamParams<M>[K])
    | null
    | undefined;
};

/** Daydream's defaults (ai-runner params.py, sd-turbo; reference §2.2). Engine settings are absent (their defaults apply). */
export const DEFAULT_PARAMS: Readonly<StreamParams<ModelId>> = Object.freeze({
  model_id: 'stabilityai/sd-turbo',
  prompt: 'flowers',
  prompt_interpolation_method: 'slerp',
  normalize_prompt_weights: true,
  normalize_seed_weights: true,
  negative_prompt: 'blurry, low quality, flat, 2d',
  guidance_scale: 1.0,
  delta: 0.7,
  num_inference_steps: 50,
  t_index_list: [12, 20, 32],
  use_safety_checker: true,
  safety_checker_threshold: 0.5,
  width: 512,
  height: 512,
  lora_dict: null,
  use_lcm_lora: true,
  lcm_lora_id: 'latent-consistency/lcm-lora-sdv1-5',
  acceleration: 'tensorrt',
  use_denoising_batch: true,
  do_add_noise: true,
  seed: 789,
  seed_interpolation_method: 'linear',
  enable_similar_image_filter: false,
  similar_image_filter_threshold: 0.98,
  similar_image_filter_max_skip_frame: 10,
  skip_diffusion: false,
  image_preprocessing: null,
  image_postprocessing: null,
  latent_preprocessing: null,
  latent_postprocessing: null,
  controlnets: [],
  ip_adapter: null,
  ip_adapter_style_image_url: null,
} satisfies StreamParams<ModelId>);

export const IP_ADAPTER_DEFAULTS: Readonly<IpAdapterParams> = Object.freeze({ scale: 1.0, enabled: true, type: 'regular', weight_type: 'linear' });
export const CONTROLNET_DEFAULTS = Object.freeze({
  conditioning_scale: 1.0,
  preprocessor: 'passthrough',
  enabled: true,
  control_guidance_start: 0.0,
  control_guidance_end: 1.0,
});

/**
 * Integer params the spec bounds only by ±(2^53 − 1) but the engine can run only within a narrower
 * range, [min, max] inclusive. The API accepts the spec's range and mergeParams clamps into these,
 * so what is stored, echoed and run is the clamped value (docs/api.md "Clamped params").
 * - num_inference_steps 1–1000: the LCM grid picks that many distinct timesteps out of the 1000
 *   the models were trained on (LcmScheduler); fewer than 1 is no grid.
 * - similar_image_filter_max_skip_frame ≥ 0: a count of frames; below 0 means the same as 0
 *   (the filter never skips).
 */
export const ENGINE_CLAMPS = Object.freeze({
  num_inference_steps: [1, 1000],
  similar_image_filter_max_skip_frame: [0, Number.MAX_SAFE_INTEGER],
} as const satisfies Partial<Record<keyof StreamParams, readonly [number, number]>>);

function fillBlock(block: ProcessingBlockPatch | null | undefined): ProcessingBlock | null {
  if (!block) return null;
  return {
    enabled: block.enabled ?? true,
    processors: block.processors.map((p) => ({ type: p.type, enabled: p.enabled ?? true, params: { ...(p.params ?? {}) } })),
  };
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * Merges `patch` over `base` (DEFAULT_PARAMS when null) and fills every default. Arrays and blocks
 * are replaced whole; `ip_adapter` is merged field by field over the current one (its fields are
 * the hot settings); `null` resets a field to its default. The one merge of the system.
 */
export function mergeParams<M extends string = string>(base: StreamParams<M> | null, patch: ParamsPatch<M>): StreamParams<M> {
  paramsWork.merges++;
  const out = structuredClone(base ?? (DEFAULT_PARAMS as StreamParams<string> as StreamParams<M>));
  const target = out as unknown as Record<string, unknown>;
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    if (value === null) {
      target[key] = structuredClone((DEFAULT_PARAMS as unknown as Record<string, unknown>)[key] ?? null);
      continue;
    }
    target[key] = structuredClone(value);
  }
  if (patch.ip_adapter) out.ip_adapter = { ...IP_ADAPTER_DEFAULTS, ...(base?.ip_adapter ?? {}), ...stripUndefined(patch.ip_adapter) };
  out.controlnets = (out.controlnets as ControlNetPatch[]).map((c) => ({
    ...CONTROLNET_DEFAULTS,
    ...stripUndefined(c),
    model_id: c.model_id,
    preprocessor_params: { ...(c.preprocessor_params ?? {}) },
  }));
  for (const k of ['image_preprocessing', 'image_postprocessing', 'latent_preprocessing', 'latent_postprocessing'] as const) {
    out[k] = fillBlock(out[k]);
  }
  for (const [key, [lo, hi]] of Object.entries(ENGINE_CLAMPS) as [keyof typeof ENGINE_CLAMPS, readonly [number, number]][]) {
    if (typeof out[key] === 'number') out[key] = Math.min(hi, Math.max(lo, out[key]));
  }
  return out;
}

/**
 * Output scale of a processing block: the product of its enabled upscalers (`upscale` by its
 * scale_factor, default 2; `realesrgan_trt` is Daydream's fixed 2× upscaler).
 */
export function outputScale(block: ProcessingBlock | null | undefined): number {
  if (!block || block.enabled === false) return 1;
  let scale = 1;
  for (const p of block.processors) {
    if (p.enabled === false || (p.type !== 'upscale' && p.type !== 'realesrgan_trt')) continue;
    const f = p.params?.['scale_factor'] ?? p.params?.['scale'];
    scale *= p.type === 'realesrgan_trt' ? 2 : typeof f === 'number' ? f : 2;
  }
  return scale;
}

// ───────────────────────────── rules on merged params

export interface ParamIssue {
  /** Path from the body root, e.g. `params.controlnets[1].model_id`. */
  field: string;
  message: string;
  /** The engine's typed error for it (UNSUPPORTED_PROCESSOR, INVALID_PROCESSOR_PARAMS), when there is one. */
  error?: NativeError;
}

export interface CheckContext {
  /**
   * FaceID IP-Adapter allowed (the API's sdxl-faceid pipeline was asked for). Undefined: the
   * caller does not police the IP-Adapter type (the engine runs what the API admitted).
   */
  faceid?: boolean;
}

/**
 * Every rule the merged params break (empty when they are usable): ranges the schema cannot see
 * alone (t_index_list vs num_inference_steps), ControlNets vs the base model's family, IP-Adapter
 * vs model, processors and preprocessors this runtime implements with params they take, and the
 * frame size upscalers would make.
 */
export function checkParams(p: StreamParams, ctx: CheckContext = {}, prefix = 'params'): ParamIssue[] {
  paramsWork.checks++;
  const issues: ParamIssue[] = [];
  const at = (path: string, message: string, error?: NativeError) => issues.push({ field: `${prefix}.${path}`, message, ...(error ? { error } : {}) });
  const family = familyOf(p.model_id);

  // The LCM grid takes N distinct timesteps out of the 1000 training ones (LcmScheduler).
  if (!Number.isInteger(p.num_inference_steps) || p.num_inference_steps < 1 || p.num_inference_steps > 1000) {
    at('num_inference_steps', `${p.num_inference_steps} is not in 1..1000`);
  }
  const n = p.t_index_list.length;
  if (n < 1 || n > 4) at('t_index_list', `needs 1 to 4 entries (got ${n})`);
  p.t_index_list.forEach((v, i) => {
    if (!Number.isInteger(v) || v < 0) at(`t_index_list[${i}]`, `${v} is not an integer ≥ 0`);
    else if (v > p.num_inference_steps) at(`t_index_list[${i}]`, `${v} is above num_inference_steps (${p.num_inference_steps})`);
    if (i > 0 && v < (p.t_index_list[i - 1] as number)) at(`t_index_list[${i}]`, 'must be non-decreasing');
  });
  for (const k of ['width', 'height'] as const) {
    if (!Number.isInteger(p[k]) || p[k] < 64 || p[k] > 2048) at(k, `${p[k]} is out of range (64–2048 px)`);
  }
  if (typeof p.prompt !== 'string' && p.prompt.length === 0) at('prompt', 'a weighted prompt list needs at least one entry');
  if (typeof p.seed !== 'number' && p.seed.length === 0) at('seed', 'a weighted seed list needs at least one entry');
  if (p.lora_dict) {
    for (const [path, w] of Object.entries(p.lora_dict)) {
      if (typeof w !== 'number' || !Number.isFinite(w)) at(`lora_dict[${JSON.stringify(path)}]`, 'must be a finite number');
    }
  }

  const allowed = controlNetsFor(p.model_id);
  const seen = new Set<string>();
  p.controlnets.forEach((c, i) => {
    if (seen.has(c.model_id)) at(`controlnets[${i}].model_id`, `${c.model_id} appears more than once; ControlNet model_ids must be unique`);
    seen.add(c.model_id);
    if (!allowed.includes(c.model_id)) {
      at(`controlnets[${i}].model_id`, `${c.model_id} is not compatible with ${p.model_id} (${family ?? 'custom'}); allowed: ${allowed.join(', ')}`);
    } else if (c.enabled && REFUSED_CONTROLNETS[c.model_id]) {
      at(`controlnets[${i}].model_id`, `${c.model_id} is not supported by this runtime yet: ${REFUSED_CONTROLNETS[c.model_id]}`);
    }
    if (typeof c.conditioning_scale !== 'number' || !Number.isFinite(c.conditioning_scale)) at(`controlnets[${i}].conditioning_scale`, 'must be a finite number');
    for (const k of ['control_guidance_start', 'control_guidance_end'] as const) {
      if (!(c[k] >= 0 && c[k] <= 1)) at(`controlnets[${i}].${k}`, 'must be in [0, 1]');
    }
    if (c.control_guidance_start > c.control_guidance_end) at(`controlnets[${i}].control_guidance_start`, 'must not be after control_guidance_end');
    // Checked on disabled entries too: what is accepted is exactly what capabilities advertise.
    if (!isControlNetPreprocessor(c.preprocessor)) {
      at(`controlnets[${i}].preprocessor`, preprocessorRefusal(c.preprocessor), new UnsupportedProcessorError(c.preprocessor, 'image', CONTROLNET_PREPROCESSORS));
      return;
    }
    if (!c.enabled) return;
    try {
      checkControlNetPreprocessor(c);
    } catch (err) {
      at(`controlnets[${i}].preprocessor_params`, (err as Error).message, err as NativeError);
    }
  });
  const cap = family ? MAX_ENABLED_CONTROLNETS[family] : undefined;
  const enabled = p.controlnets.filter((c) => c.enabled).length;
  if (cap !== undefined && enabled > cap) at('controlnets', `${p.model_id} allows at most ${cap} enabled ControlNets (got ${enabled})`);

  if (p.ip_adapter && p.ip_adapter.enabled !== false) {
    if (!supportsIpAdapter(p.model_id)) {
      at('ip_adapter', `IP-Adapter is not available for ${p.model_id}; use an SD1.5 or SDXL model`);
    } else if (ctx.faceid !== undefined && p.ip_adapter.type === 'faceid' && !(ctx.faceid && family === 'sdxl')) {
      at('ip_adapter.type', `faceid needs an SDXL-faceid pipeline (model_id streamdiffusion-sdxl-faceid); ${p.model_id} takes type regular`);
    }
  }
  if (p.ip_adapter_style_image_url !== null && !supportsIpAdapter(p.model_id)) {
    at('ip_adapter_style_image_url', `IP-Adapter is not available for ${p.model_id}; a style image has no effect`);
  }

  (p.audio_mappings ?? []).forEach((m, i) => {
    // The schema checked each mapping on its own (mappingProblems); the engine checks them again.
    const own = mappingProblems(m);
    for (const [field, message] of own) at(`audio_mappings[${i}].${field}`, message);
    const target = own.length === 0 ? mappingTargetProblem(m, p) : null;
    if (target) at(`audio_mappings[${i}].param`, target);
  });

  // Upscalers multiply: bound what a chain may make of a frame (the engine clamps at the same size).
  for (const key of ['image_preprocessing', 'image_postprocessing'] as const) {
    const side = Math.max(p.width, p.height) * outputScale(p[key]);
    if (side > MAX_FRAME_SIDE) at(key, `its upscalers make ${side} px frames; at most ${MAX_FRAME_SIDE} px per side (${Math.max(p.width, p.height)} px × ${outputScale(p[key])})`);
  }
  for (const [key, kind] of [
    ['image_preprocessing', 'image'],
    ['image_postprocessing', 'image'],
    ['latent_preprocessing', 'latent'],
    ['latent_postprocessing', 'latent'],
  ] as const) {
    const block = p[key];
    if (!block) continue;
    const supported = kind === 'image' ? IMAGE_PROCESSOR_TYPES : LATENT_PROCESSOR_TYPES;
    block.processors.forEach((proc, i) => {
      const path = `${key}.processors[${i}]`;
      if (!supported.includes(proc.type)) {
        const known = kind === 'image' && DAYDREAM_IMAGE_PROCESSORS.has(proc.type);
        at(
          `${path}.type`,
          known
            ? `${proc.type} is not supported by this runtime yet (supported ${kind} processors: ${supported.join(', ')})`
            : `unknown ${kind} processor ${JSON.stringify(proc.type)} (supported: ${supported.join(', ')})`,
          new UnsupportedProcessorError(proc.type, kind, supported),
        );
        return;
      }
      try {
        // The engine's own parser, one processor at a time so the message names its index.
        if (kind === 'image') createProcessorChain({ processors: [proc] }, 'image');
        else createProcessorChain({ processors: [proc] }, 'latent');
      } catch (err) {
        at(`${path}.params`, (err as Error).message, err as NativeError);
      }
    });
  }
  return issues;
}

/** Daydream's image processor names (refused by name when this runtime lacks them). */
const DAYDREAM_IMAGE_PROCESSORS: ReadonlySet<string> = new Set(DAYDREAM_IMAGE_PROCESSOR_NAMES);

/** Throws the first issue of checkParams: the engine's form (typed NativeError). Returns `p`. */
export function assertParams(p: StreamParams): StreamParams {
  const first = checkParams(p)[0];
  if (first) throw first.error ?? new InvalidParamsError(`${first.field.replace(/^params\./, '')}: ${first.message}`);
  return p;
}

/**
 * Checks a ControlNet's preprocessor and its `preprocessor_params` against the engine's own parsers.
 * Throws UnsupportedProcessorError for a preprocessor this engine does not implement, and
 * InvalidProcessorParamsError for `preprocessor_params` that preprocessor does not take.
 */
export function checkControlNetPreprocessor(cfg: { preprocessor?: string | undefined; preprocessor_params?: Record<string, unknown> | undefined }): void {
  const p = cfg.preprocessor ?? 'passthrough';
  if (!isControlNetPreprocessor(p)) throw new UnsupportedProcessorError(p, 'image', CONTROLNET_PREPROCESSORS);
  if (isModelPreprocessor(p)) parsePreprocessorParams(p, cfg.preprocessor_params ?? {});
  else createProcessorChain({ processors: [{ type: p, params: cfg.preprocessor_params ?? {} }] }, 'image');
}

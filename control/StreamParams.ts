/**
 * Stream params (spec "Area B: Stream params"; reference/live-diffusion.md §2.2–2.4): the zod
 * schema the routes validate (shape, types, per-field bounds), the defaults filled in on create,
 * the model ↔ ControlNet ↔ IP-Adapter tables, the rules checked on the MERGED params (cross-field:
 * t_index_list vs num_inference_steps, ControlNets vs base model, IP-Adapter vs model, processors
 * the runtime implements), and the hot/reload classification of an update.
 *
 * Every choice the spec leaves "not shown" is recorded in docs/api.md ("Area B streams choices").
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import {
  checkControlNetPreprocessor,
  CONTROLNETS_BY_FAMILY,
  CONTROLNET_PREPROCESSORS as ENGINE_CONTROLNET_PREPROCESSORS,
  createProcessorChain,
  IMAGE_PROCESSOR_TYPES,
  LATENT_PROCESSOR_TYPES,
  MAX_FRAME_SIDE,
  type ModelFamily,
  REFUSED_CONTROLNETS,
} from '../native/index.ts';

/** Spec: integers are bounded to ±(2^53 − 1) where bounds are stated. */
export const MAX_INT = Number.MAX_SAFE_INTEGER;
const SafeInt = z.number().int().min(-MAX_INT).max(MAX_INT);
const Finite = z.number().finite();
/**
 * Largest float32 magnitude. Numbers the spec leaves unbounded (guidance_scale, delta,
 * conditioning_scale, IP-Adapter scale, thresholds, LoRA weights) are only held to this: the engine
 * feeds them to float32 tensors, where anything larger becomes infinite and turns frames into NaN.
 */
export const FLOAT32_MAX = 3.4028234663852886e38;
/** Why the remaining bounds exist (shown in the OpenAPI schema and docs/api.md). */
export const BOUND_REASONS = {
  float32: 'Any number the engine can hold in a float32 tensor (|x| ≤ 3.4e38); no other bound',
  steps: '1 to 1000: the LCM grid picks this many distinct timesteps out of the 1000 the models were trained on',
  weight: '≥ 0: blend weights are normalised by their sum, which negative weights can bring to zero',
} as const;
const EngineFloat = Finite.min(-FLOAT32_MAX).max(FLOAT32_MAX);
/** Free text fields (prompts, ids): long enough for any real prompt, short enough to bound memory. */
const TEXT_MAX = 2000;
/** Entries of a weighted prompt or seed list (blending more than this is never useful live). */
const BLEND_MAX = 16;

// ───────────────────────────── models

/**
 * Base model families (ai-runner MODEL_ID_TO_TYPE):
 * - `sd21`: SD 2.1 (sd-turbo); 6 ControlNets, no IP-Adapter;
 * - `sd15`: SD 1.5 (dreamshaper-8, openjourney-v4); 4 ControlNets, IP-Adapter;
 * - `sdxl`: SDXL (sdxl-turbo); 3 ControlNets, IP-Adapter (FaceID only on an sdxl-faceid pipeline).
 */
export type { ModelFamily };

export const MODEL_IDS = ['stabilityai/sd-turbo', 'stabilityai/sdxl-turbo', 'Lykon/dreamshaper-8', 'prompthero/openjourney-v4'] as const;
export type ModelId = (typeof MODEL_IDS)[number];

export interface ModelInfo {
  family: ModelFamily;
  ipAdapter: boolean;
  cachedAttention: boolean;
  /** The deprecated `pipeline_id` that names this model (also reported as status `pipeline_id`). */
  legacyPipelineId: string;
}

export const MODELS: Readonly<Record<ModelId, ModelInfo>> = {
  'stabilityai/sd-turbo': { family: 'sd21', ipAdapter: false, cachedAttention: false, legacyPipelineId: 'pip_SD-turbo' },
  'stabilityai/sdxl-turbo': { family: 'sdxl', ipAdapter: true, cachedAttention: true, legacyPipelineId: 'pip_SDXL-turbo' },
  'Lykon/dreamshaper-8': { family: 'sd15', ipAdapter: true, cachedAttention: true, legacyPipelineId: 'pip_SD15' },
  'prompthero/openjourney-v4': { family: 'sd15', ipAdapter: true, cachedAttention: true, legacyPipelineId: 'pip_SD15-openjourney' },
};

/** Deprecated create field `pipeline_id` → model. `pip_SD-turbo` is the spec's; the rest follow its pattern. */
export const LEGACY_PIPELINE_IDS: Readonly<Record<string, ModelId>> = {
  'pip_SD-turbo': 'stabilityai/sd-turbo',
  'pip_SDXL-turbo': 'stabilityai/sdxl-turbo',
  pip_SD15: 'Lykon/dreamshaper-8',
  'pip_SD15-dreamshaper': 'Lykon/dreamshaper-8',
  'pip_SD15-openjourney': 'prompthero/openjourney-v4',
};

/** ai-runner CONTROLNETS_BY_TYPE (6 / 4 / 3 as the spec counts): the engine's own map, one source. */
export { CONTROLNETS_BY_FAMILY };
export const CONTROLNET_IDS = [...CONTROLNETS_BY_FAMILY.sd21, ...CONTROLNETS_BY_FAMILY.sd15, ...CONTROLNETS_BY_FAMILY.sdxl] as [string, ...string[]];

/**
 * ControlNet preprocessors we accept (ai-runner's ImageProcessorName minus the output-resizing
 * post-processors realesrgan_trt/upscale/sharpen, which make no sense before a ControlNet).
 */
export const CONTROLNET_PREPROCESSORS = [
  'passthrough',
  'blur',
  'canny',
  'depth',
  'depth_tensorrt',
  'external',
  'feedback',
  'hed',
  'lineart',
  'mediapipe_pose',
  'mediapipe_segmentation',
  'openpose',
  'pose_tensorrt',
  'soft_edge',
  'standard_lineart',
  'temporal_net_tensorrt',
] as const;

/** Daydream's ImageProcessorName: names we know of; those the runtime lacks are refused by name. */
const DAYDREAM_IMAGE_PROCESSORS = new Set([...CONTROLNET_PREPROCESSORS, 'realesrgan_trt', 'sharpen', 'upscale']);

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

// ───────────────────────────── schema (shape and per-field bounds)

const Dimension = z.number().int().min(384, 'must be at least 384').max(1024, 'must be at most 1024').multipleOf(64, 'must be divisible by 64');
const Weight = Finite.min(0, 'weights must be ≥ 0').max(FLOAT32_MAX).describe(BOUND_REASONS.weight);

const PromptSchema = z.union([
  z.string().max(TEXT_MAX),
  z.array(z.tuple([z.string().max(TEXT_MAX), Weight])).min(1, 'a weighted prompt list needs at least one entry').max(BLEND_MAX),
]);
const SeedSchema = z.union([SafeInt, z.array(z.tuple([SafeInt, Weight])).min(1, 'a weighted seed list needs at least one entry').max(BLEND_MAX)]);

const TIndexList = z
  .array(z.number().int().min(0).max(50, 'must not be above 50'))
  .min(1, 'needs 1 to 4 entries')
  .max(4, 'needs 1 to 4 entries')
  .superRefine((list, ctx) => {
    for (let i = 1; i < list.length; i++) {
      if ((list[i] as number) < (list[i - 1] as number)) ctx.addIssue({ code: 'custom', path: [i], message: 'must be non-decreasing' });
    }
  });

/**
 * Free-form parameter objects (a processor's `params`, a ControlNet's `preprocessor_params`):
 * what they hold is the processor's business, how big they are is ours. Real ones are flat maps of
 * numbers and short strings; these bounds leave room for nesting a few levels and refuse what
 * would cost the server (a payload nested thousands of levels overflows any recursive walk).
 */
export const FREE_PARAMS_LIMITS = { depth: 4, values: 256, textBytes: 8192 } as const;

/** Why `value` is over FREE_PARAMS_LIMITS, or null. Iterative: a hostile depth costs no stack. */
function freeParamsProblem(value: unknown): string | null {
  const stack: [unknown, number][] = [[value, 1]];
  let values = 0;
  let text = 0;
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (++values > FREE_PARAMS_LIMITS.values) return `at most ${FREE_PARAMS_LIMITS.values} values in all`;
    if (typeof v === 'string') text += v.length;
    if (text > FREE_PARAMS_LIMITS.textBytes) return `at most ${FREE_PARAMS_LIMITS.textBytes} characters of text in all`;
    if (v === null || typeof v !== 'object') continue;
    if (depth > FREE_PARAMS_LIMITS.depth) return `nested at most ${FREE_PARAMS_LIMITS.depth} levels deep`;
    for (const [k, child] of Object.entries(v)) {
      text += k.length;
      stack.push([child, depth + 1]);
    }
  }
  return null;
}

const FreeParams = z.record(z.string(), z.unknown()).superRefine((v, ctx) => {
  const problem = freeParamsProblem(v);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

const ProcessorSchema = z
  .object({
    type: z.string().min(1).max(64),
    enabled: z.boolean().optional(),
    params: FreeParams.optional(),
  })
  .strict();
const ProcessingBlockSchema = z.object({ enabled: z.boolean().optional(), processors: z.array(ProcessorSchema).max(16) }).strict();

const ControlNetSchema = z
  .object({
    model_id: z.enum(CONTROLNET_IDS),
    conditioning_scale: EngineFloat.optional().describe(`Typical 0.0–1.0; 0 disables. Default 1.0. ${BOUND_REASONS.float32}`),
    preprocessor: z.enum(CONTROLNET_PREPROCESSORS).optional().describe('Default passthrough (no preprocessing)'),
    enabled: z.boolean().optional(),
    preprocessor_params: FreeParams.optional().describe(
      'Settings of the preprocessor, checked by its own schema (depth_tensorrt: detect_resolution; pose_tensorrt: detect_resolution, threshold; soft_edge: detect_resolution, safe; canny: low_threshold, high_threshold). Hot',
    ),
    control_guidance_start: Finite.min(0).max(1).optional(),
    control_guidance_end: Finite.min(0).max(1).optional(),
  })
  .strict();

const IpAdapterSchema = z
  .object({
    scale: EngineFloat.optional().describe(`Style strength. Default 1.0. ${BOUND_REASONS.float32}`),
    enabled: z.boolean().optional(),
    type: z.enum(['regular', 'faceid']).optional(),
    weight_type: z.enum(IP_ADAPTER_WEIGHT_TYPES).optional(),
  })
  .strict();

const HttpsUrl = z.url({ protocol: /^https$/, error: 'must be an https:// URL' }).max(2048);

/**
 * Every field optional (create fills defaults, update carries only changes). `null` on a nullable
 * field means "back to the default". Unknown fields are refused, so a typo never passes silently.
 */
export const ParamsInputSchema = z
  .object({
    model_id: z.enum(MODEL_IDS).optional(),
    prompt: PromptSchema.optional(),
    prompt_interpolation_method: z.enum(['linear', 'slerp']).optional(),
    normalize_prompt_weights: z.boolean().optional(),
    normalize_seed_weights: z.boolean().optional(),
    negative_prompt: z.string().max(TEXT_MAX).optional(),
    guidance_scale: EngineFloat.optional().describe(`Default 1.0; CFG runs above 1. ${BOUND_REASONS.float32}`),
    delta: EngineFloat.optional().describe(`Default 0.7. ${BOUND_REASONS.float32}`),
    num_inference_steps: z.number().int().min(1).max(1000).optional().describe(`Default 50. ${BOUND_REASONS.steps}`),
    t_index_list: TIndexList.optional(),
    use_safety_checker: z.boolean().optional(),
    safety_checker_threshold: EngineFloat.optional().describe(`Default 0.5; frames scoring above it are blanked. ${BOUND_REASONS.float32}`),
    width: Dimension.optional(),
    height: Dimension.optional(),
    lora_dict: z.record(z.string().min(1).max(512), EngineFloat.describe(BOUND_REASONS.float32)).nullable().optional(),
    use_lcm_lora: z.boolean().optional(),
    lcm_lora_id: z.string().min(1).max(512).optional(),
    acceleration: z.enum(['none', 'xformers', 'tensorrt']).optional(),
    use_denoising_batch: z.boolean().optional(),
    do_add_noise: z.boolean().optional(),
    seed: SeedSchema.optional(),
    seed_interpolation_method: z.enum(['linear', 'slerp']).optional(),
    enable_similar_image_filter: z.boolean().optional(),
    similar_image_filter_threshold: EngineFloat.optional().describe(`Default 0.98; 1 or more never skips. ${BOUND_REASONS.float32}`),
    similar_image_filter_max_skip_frame: z.number().int().min(0).max(MAX_INT).optional(),
    skip_diffusion: z.boolean().optional(),
    image_preprocessing: ProcessingBlockSchema.nullable().optional(),
    image_postprocessing: ProcessingBlockSchema.nullable().optional(),
    latent_preprocessing: ProcessingBlockSchema.nullable().optional(),
    latent_postprocessing: ProcessingBlockSchema.nullable().optional(),
    controlnets: z.array(ControlNetSchema).max(8).optional(),
    ip_adapter: IpAdapterSchema.nullable().optional(),
    ip_adapter_style_image_url: HttpsUrl.nullable().optional(),
  })
  .strict();
export type ParamsInput = z.infer<typeof ParamsInputSchema>;

// ───────────────────────────── full params (defaults filled)

export interface ProcessorConfig {
  type: string;
  enabled: boolean;
  params: Record<string, unknown>;
}
export interface ProcessingBlock {
  enabled: boolean;
  processors: ProcessorConfig[];
}
export interface ControlNet {
  model_id: string;
  conditioning_scale: number;
  preprocessor: string;
  enabled: boolean;
  preprocessor_params: Record<string, unknown>;
  control_guidance_start: number;
  control_guidance_end: number;
}
export interface IpAdapter {
  scale: number;
  enabled: boolean;
  type: 'regular' | 'faceid';
  weight_type: (typeof IP_ADAPTER_WEIGHT_TYPES)[number];
}

/** The params as stored and returned: every field present. */
export interface StreamParams {
  model_id: ModelId;
  prompt: string | [string, number][];
  prompt_interpolation_method: 'linear' | 'slerp';
  normalize_prompt_weights: boolean;
  normalize_seed_weights: boolean;
  negative_prompt: string;
  guidance_scale: number;
  delta: number;
  num_inference_steps: number;
  t_index_list: number[];
  use_safety_checker: boolean;
  safety_checker_threshold: number;
  width: number;
  height: number;
  lora_dict: Record<string, number> | null;
  use_lcm_lora: boolean;
  lcm_lora_id: string;
  acceleration: 'none' | 'xformers' | 'tensorrt';
  use_denoising_batch: boolean;
  do_add_noise: boolean;
  seed: number | [number, number][];
  seed_interpolation_method: 'linear' | 'slerp';
  enable_similar_image_filter: boolean;
  similar_image_filter_threshold: number;
  similar_image_filter_max_skip_frame: number;
  skip_diffusion: boolean;
  image_preprocessing: ProcessingBlock | null;
  image_postprocessing: ProcessingBlock | null;
  latent_preprocessing: ProcessingBlock | null;
  latent_postprocessing: ProcessingBlock | null;
  controlnets: ControlNet[];
  /** null = IP-Adapter off. */
  ip_adapter: IpAdapter | null;
  /** null = the runtime's default style image. */
  ip_adapter_style_image_url: string | null;
}

/** Daydream's defaults (ai-runner params.py; reference §2.2). */
export const DEFAULT_PARAMS: Readonly<StreamParams> = Object.freeze({
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
} satisfies StreamParams);

export const IP_ADAPTER_DEFAULTS: Readonly<IpAdapter> = Object.freeze({ scale: 1.0, enabled: true, type: 'regular', weight_type: 'linear' });
export const CONTROLNET_DEFAULTS = Object.freeze({
  conditioning_scale: 1.0,
  preprocessor: 'passthrough',
  enabled: true,
  control_guidance_start: 0.0,
  control_guidance_end: 1.0,
});

/** Description of the response fields that are left out while unset (spec types them as object / string, never null). */
const UNSET = 'Omitted while unset';

/**
 * The params as the Stream record and the status show them: every field with a value; the fields
 * whose default is "unset" (`lora_dict`, the four processing blocks, `ip_adapter`,
 * `ip_adapter_style_image_url`) are left out rather than `null`, since the spec types them as an
 * object or a string. Input still takes `null` to reset a field.
 */
export type PublicStreamParams = { [K in keyof StreamParams]: null extends StreamParams[K] ? Exclude<StreamParams[K], null> | undefined : StreamParams[K] };

export function publicParams(p: StreamParams): PublicStreamParams {
  return Object.fromEntries(Object.entries(p).filter(([, v]) => v !== null)) as PublicStreamParams;
}

/** Response schema of the full params (documents every field in the OpenAPI). */
const FullProcessingBlock = z.object({ enabled: z.boolean(), processors: z.array(z.object({ type: z.string(), enabled: z.boolean(), params: z.record(z.string(), z.unknown()) })) });
export const StreamParamsSchema = z
  .object({
    model_id: z.enum(MODEL_IDS),
    prompt: z.union([z.string(), z.array(z.tuple([z.string(), z.number()]))]),
    prompt_interpolation_method: z.enum(['linear', 'slerp']),
    normalize_prompt_weights: z.boolean(),
    normalize_seed_weights: z.boolean(),
    negative_prompt: z.string(),
    guidance_scale: z.number(),
    delta: z.number(),
    num_inference_steps: z.number().int(),
    t_index_list: z.array(z.number().int()),
    use_safety_checker: z.boolean(),
    safety_checker_threshold: z.number(),
    width: z.number().int(),
    height: z.number().int(),
    lora_dict: z.record(z.string(), z.number()).optional().describe(UNSET),
    use_lcm_lora: z.boolean(),
    lcm_lora_id: z.string(),
    acceleration: z.enum(['none', 'xformers', 'tensorrt']),
    use_denoising_batch: z.boolean(),
    do_add_noise: z.boolean(),
    seed: z.union([z.number().int(), z.array(z.tuple([z.number().int(), z.number()]))]),
    seed_interpolation_method: z.enum(['linear', 'slerp']),
    enable_similar_image_filter: z.boolean(),
    similar_image_filter_threshold: z.number(),
    similar_image_filter_max_skip_frame: z.number().int(),
    skip_diffusion: z.boolean(),
    image_preprocessing: FullProcessingBlock.optional().describe(UNSET),
    image_postprocessing: FullProcessingBlock.optional().describe(UNSET),
    latent_preprocessing: FullProcessingBlock.optional().describe(UNSET),
    latent_postprocessing: FullProcessingBlock.optional().describe(UNSET),
    controlnets: z.array(
      z.object({
        model_id: z.string(),
        conditioning_scale: z.number(),
        preprocessor: z.string(),
        enabled: z.boolean(),
        preprocessor_params: z.record(z.string(), z.unknown()),
        control_guidance_start: z.number(),
        control_guidance_end: z.number(),
      }),
    ),
    ip_adapter: z
      .object({ scale: z.number(), enabled: z.boolean(), type: z.enum(['regular', 'faceid']), weight_type: z.enum(IP_ADAPTER_WEIGHT_TYPES) })
      .optional()
      .describe(`${UNSET} (IP-Adapter off)`),
    ip_adapter_style_image_url: z.string().optional().describe(`${UNSET} (the runtime's default style image)`),
  })
  .meta({ id: 'StreamParams' });

function fillBlock(block: z.infer<typeof ProcessingBlockSchema> | ProcessingBlock | null | undefined): ProcessingBlock | null {
  if (!block) return null;
  return {
    enabled: block.enabled ?? true,
    processors: block.processors.map((p) => ({ type: p.type, enabled: p.enabled ?? true, params: { ...(p.params ?? {}) } })),
  };
}

const clone = <T>(v: T): T => structuredClone(v);

/**
 * Merges `patch` over `base` (defaults when base is absent) and fills every default. Arrays and
 * blocks are replaced whole; `ip_adapter` is merged field by field over the current one (its fields
 * are the hot settings); `null` resets a nullable field to its default.
 */
export function mergeParams(base: StreamParams | null, patch: ParamsInput): StreamParams {
  const out = clone(base ?? (DEFAULT_PARAMS as StreamParams));
  const target = out as unknown as Record<string, unknown>;
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    if (value === null) {
      target[key] = clone((DEFAULT_PARAMS as unknown as Record<string, unknown>)[key] ?? null);
      continue;
    }
    target[key] = clone(value);
  }
  if (patch.ip_adapter) out.ip_adapter = { ...IP_ADAPTER_DEFAULTS, ...(base?.ip_adapter ?? {}), ...stripUndefined(patch.ip_adapter) };
  out.controlnets = out.controlnets.map((c) => ({
    ...CONTROLNET_DEFAULTS,
    ...stripUndefined(c),
    preprocessor_params: { ...(c.preprocessor_params ?? {}) },
  })) as ControlNet[];
  for (const k of ['image_preprocessing', 'image_postprocessing', 'latent_preprocessing', 'latent_postprocessing'] as const) {
    out[k] = fillBlock(out[k]);
  }
  return out;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

// ───────────────────────────── rules on the merged params

export interface ParamIssue {
  /** Path from the body root, e.g. `params.controlnets[1].model_id`. */
  field: string;
  message: string;
}

export interface CheckContext {
  /** FaceID IP-Adapter allowed (an sdxl-faceid pipeline was asked for). */
  faceid?: boolean;
}

/**
 * Cross-field rules, checked on the params as they would be after the change (so an update of
 * `num_inference_steps` alone is refused when the stored t_index_list would fall outside it).
 * Returns every broken rule; empty when the params are usable.
 */
export function checkParams(p: StreamParams, ctx: CheckContext = {}, prefix = 'params'): ParamIssue[] {
  const issues: ParamIssue[] = [];
  const at = (path: string, message: string) => issues.push({ field: `${prefix}.${path}`, message });
  const model = MODELS[p.model_id];

  p.t_index_list.forEach((v, i) => {
    if (v > p.num_inference_steps) at(`t_index_list[${i}]`, `${v} is above num_inference_steps (${p.num_inference_steps})`);
  });

  const allowed = CONTROLNETS_BY_FAMILY[model.family];
  const seen = new Set<string>();
  p.controlnets.forEach((c, i) => {
    if (seen.has(c.model_id)) at(`controlnets[${i}].model_id`, `${c.model_id} appears more than once; ControlNet model_ids must be unique`);
    seen.add(c.model_id);
    if (!allowed.includes(c.model_id)) {
      at(`controlnets[${i}].model_id`, `${c.model_id} is not compatible with ${p.model_id} (${model.family}); allowed: ${allowed.join(', ')}`);
    } else if (c.enabled && REFUSED_CONTROLNETS[c.model_id]) {
      at(`controlnets[${i}].model_id`, `${c.model_id} is not supported by this runtime yet: ${REFUSED_CONTROLNETS[c.model_id]}`);
    }
    if (c.control_guidance_start > c.control_guidance_end) {
      at(`controlnets[${i}].control_guidance_start`, 'must not be after control_guidance_end');
    }
    if (c.enabled && !ENGINE_CONTROLNET_PREPROCESSORS.includes(c.preprocessor)) {
      at(`controlnets[${i}].preprocessor`, `${c.preprocessor} is not supported by this runtime yet (supported: ${ENGINE_CONTROLNET_PREPROCESSORS.join(', ')})`);
    } else if (c.enabled) {
      try {
        // The engine's own parser: each preprocessor takes its own preprocessor_params.
        checkControlNetPreprocessor(c);
      } catch (err) {
        at(`controlnets[${i}].preprocessor_params`, (err as Error).message);
      }
    }
  });

  if (p.ip_adapter) {
    if (!model.ipAdapter) {
      at('ip_adapter', `IP-Adapter is not available for ${p.model_id}; use an SD1.5 or SDXL model`);
    } else if (p.ip_adapter.type === 'faceid' && !(ctx.faceid && model.family === 'sdxl')) {
      at('ip_adapter.type', `faceid needs an SDXL-faceid pipeline (model_id streamdiffusion-sdxl-faceid); ${p.model_id} takes type regular`);
    }
  }
  if (p.ip_adapter_style_image_url !== null && !model.ipAdapter) {
    at('ip_adapter_style_image_url', `IP-Adapter is not available for ${p.model_id}; a style image has no effect`);
  }

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
        const known = kind === 'image' ? DAYDREAM_IMAGE_PROCESSORS.has(proc.type) : false;
        at(
          `${path}.type`,
          known
            ? `${proc.type} is not supported by this runtime yet (supported ${kind} processors: ${supported.join(', ')})`
            : `unknown ${kind} processor ${JSON.stringify(proc.type)} (supported: ${supported.join(', ')})`,
        );
        return;
      }
      try {
        // The engine's own parser, one processor at a time so the message names its index.
        if (kind === 'image') createProcessorChain({ processors: [proc] }, 'image');
        else createProcessorChain({ processors: [proc] }, 'latent');
      } catch (err) {
        at(`${path}.params`, (err as Error).message);
      }
    });
  }
  return issues;
}

// ───────────────────────────── hot vs reload

/**
 * Hot keys: the spec's PATCH list, with the details of ai-runner's `_update_params_dynamic`
 * (reference §2.2): prompt/seed blending settings, the safety checker and the processing chains are
 * hot too — except an `image_postprocessing` change of the output scale (upscale), which changes
 * the resolution and so reloads. For `controlnets` only a change of conditioning_scale or
 * preprocessor_params on the same list is hot. `ip_adapter` is hot whatever changes, adding and removing it included (spec: "fully
 * hot-swappable"). Everything else reloads.
 */
export const HOT_KEYS: ReadonlySet<string> = new Set([
  'prompt',
  'prompt_interpolation_method',
  'normalize_prompt_weights',
  'negative_prompt',
  'guidance_scale',
  'delta',
  'num_inference_steps',
  't_index_list',
  'seed',
  'seed_interpolation_method',
  'normalize_seed_weights',
  'use_safety_checker',
  'controlnets',
  'ip_adapter',
  'ip_adapter_style_image_url',
  'image_preprocessing',
  'image_postprocessing',
  'latent_preprocessing',
  'latent_postprocessing',
]);

/** Output scale of a post-processing chain: the product of its enabled upscalers (default 2×). */
function outputScale(block: StreamParams['image_postprocessing']): number {
  if (!block || block.enabled === false) return 1;
  let scale = 1;
  for (const p of block.processors) {
    if (p.enabled === false || (p.type !== 'upscale' && p.type !== 'realesrgan_trt')) continue;
    const f = (p.params as Record<string, unknown> | undefined)?.['scale_factor'] ?? (p.params as Record<string, unknown> | undefined)?.['scale'];
    scale *= p.type === 'realesrgan_trt' ? 2 : typeof f === 'number' ? f : 2;
  }
  return scale;
}

/**
 * - `none`: nothing changed (not sent to the node);
 * - `hot`: only hot keys changed; applied on the next frame;
 * - `reload`: at least one key needs a pipeline reload; the whole update rides with it.
 */
export type UpdateMode = 'none' | 'hot' | 'reload';

export interface Classification {
  mode: UpdateMode;
  hot: string[];
  reload: string[];
}

const same = (a: unknown, b: unknown) => stableJson(a) === stableJson(b);

export function classifyChanges(before: StreamParams, after: StreamParams): Classification {
  const hot: string[] = [];
  const reload: string[] = [];
  for (const key of Object.keys(after) as (keyof StreamParams)[]) {
    if (same(before[key], after[key])) continue;
    let isHot = HOT_KEYS.has(key);
    if (key === 'controlnets') {
      // conditioning_scale and preprocessor_params are hot; the rest of an entry reloads.
      const strip = (list: ControlNet[]) => list.map(({ conditioning_scale: _s, preprocessor_params: _p, ...rest }) => rest);
      isHot = before.controlnets.length === after.controlnets.length && same(strip(before.controlnets), strip(after.controlnets));
    } else if (key === 'image_postprocessing') {
      isHot = outputScale(before.image_postprocessing) === outputScale(after.image_postprocessing);
    }
    (isHot ? hot : reload).push(key);
  }
  return { mode: reload.length > 0 ? 'reload' : hot.length > 0 ? 'hot' : 'none', hot, reload };
}

// ───────────────────────────── hashing

/** JSON with object keys sorted at every level (ai-runner hashes `json.dumps(sort_keys=True)`). */
export function stableJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return v;
  });
}

/** md5 hex of the sorted JSON, as ai-runner's `last_params_hash`. */
export function paramsHash(params: unknown): string {
  return createHash('md5').update(stableJson(params)).digest('hex');
}

/** The pipeline-variant model ids of POST /beta/streams/{id}/prompts and the family each serves. */
export const BETA_MODEL_IDS = ['streamdiffusion', 'streamdiffusion-sd15', 'streamdiffusion-sdxl', 'streamdiffusion-sdxl-faceid'] as const;
export type BetaModelId = (typeof BETA_MODEL_IDS)[number];
export const BETA_MODEL_FAMILY: Readonly<Record<BetaModelId, { family: ModelFamily; defaultModel: ModelId; faceid: boolean }>> = {
  streamdiffusion: { family: 'sd21', defaultModel: 'stabilityai/sd-turbo', faceid: false },
  'streamdiffusion-sd15': { family: 'sd15', defaultModel: 'Lykon/dreamshaper-8', faceid: false },
  'streamdiffusion-sdxl': { family: 'sdxl', defaultModel: 'stabilityai/sdxl-turbo', faceid: false },
  'streamdiffusion-sdxl-faceid': { family: 'sdxl', defaultModel: 'stabilityai/sdxl-turbo', faceid: true },
};

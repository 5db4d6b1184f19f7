/**
 * Stream params at the HTTP boundary (spec "Area B: Stream params"; reference/live-diffusion.md
 * §2.2–2.4): the zod schemas the routes validate (shape, types, per-field bounds) and document,
 * declared against native's params module, which owns the type, the defaults, the merge, the
 * cross-field rules and the hot/reload plan. Also the API's own tables: legacy pipeline ids, the
 * beta prompt route's variants, the public (null-free) view and its hash.
 *
 * Every choice the spec leaves "not shown" is recorded in docs/api.md ("Area B streams choices").
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import {
  AUDIO_FEATURES,
  AUDIO_SOURCES,
  HOT_KEYS,
  MAPPABLE_PARAMS,
  MAX_AUDIO_MAPPINGS,
  MAX_SMOOTHING_MS,
  mappingProblems,
  CONTROLNET_IDS,
  IP_ADAPTER_WEIGHT_TYPES,
  CONTROLNET_PREPROCESSORS,
  preprocessorRefusal,
  MODEL_IDS,
  stableJson,
  type ModelFamily,
  type ModelId,
  type ParamsPatch,
  type StreamParams as EngineParams,
} from '../native/params/index.ts';

export {
  CONTROLNET_IDS,
  CONTROLNETS_BY_FAMILY,
  DEFAULT_PARAMS,
  IP_ADAPTER_WEIGHT_TYPES,
  MODEL_IDS,
  MODELS,
  checkParams,
  mergeParams,
  planUpdate,
  stableJson,
  type ModelFamily,
  type ModelId,
  type ParamIssue,
  type UpdatePlan,
} from '../native/params/index.ts';

/** The params module's one type, over the API's model vocabulary. */
export type StreamParams = EngineParams<ModelId>;

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
  steps: 'Any integer within ±9007199254740991 (the spec bound); the engine runs it clamped to 1–1000, the 1000 timesteps the models were trained on, and the clamped value is what is stored and shown',
  maxSkip: 'Any integer within ±9007199254740991 (the spec bound); below 0 is clamped to 0 (the filter never skips), the value stored and shown',
  weight: '≥ 0: blend weights are normalised by their sum, which negative weights can bring to zero',
} as const;
const EngineFloat = Finite.min(-FLOAT32_MAX).max(FLOAT32_MAX);
/** Free text fields (prompts, ids): long enough for any real prompt, short enough to bound memory. */
const TEXT_MAX = 2000;
/** Entries of a weighted prompt or seed list (blending more than this is never useful live). */
const BLEND_MAX = 16;


/** Deprecated create field `pipeline_id` → model. `pip_SD-turbo` is the spec's; the rest follow its pattern. */
export const LEGACY_PIPELINE_IDS: Readonly<Record<string, ModelId>> = {
  'pip_SD-turbo': 'stabilityai/sd-turbo',
  'pip_SDXL-turbo': 'stabilityai/sdxl-turbo',
  pip_SD15: 'Lykon/dreamshaper-8',
  'pip_SD15-dreamshaper': 'Lykon/dreamshaper-8',
  'pip_SD15-openjourney': 'prompthero/openjourney-v4',
};


/**
 * ControlNet preprocessor names the API accepts: exactly those the engine runs and capabilities
 * advertise (native's one list); any other is a 400 naming the field and saying why.
 */
const Preprocessor = z.enum(CONTROLNET_PREPROCESSORS, { error: (iss) => preprocessorRefusal(String(iss.input)) });



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
    preprocessor: Preprocessor.optional().describe('Default passthrough (no preprocessing)'),
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

/**
 * One sound-reactive param (native/params/AudioMapping.ts): the shape here, then the param path,
 * the feature it takes and the range against the param's own bounds, each issue on its field.
 */
const AudioMappingSchema = z
  .object({
    source: z.enum(AUDIO_SOURCES).describe("Whose audio: the publisher's, or the soundtrack's take at its play position"),
    feature: z
      .enum(AUDIO_FEATURES)
      .describe('rms and band:low/mid/high: loudness 0 (−60 dBFS) to 1 (full scale); onset: an attack; beat: an attack in the low band (kick). Seed takes onset or beat'),
    param: z
      .string()
      .max(64)
      .describe(`Hot param it sets on every frame: ${Object.values(MAPPABLE_PARAMS)
        .map((m) => m.path)
        .join(', ')}`),
    range: z.tuple([Finite, Finite]).describe('Value at feature 0 and at feature 1 (min > max inverts); seed: the seeds picked from on each event, inclusive'),
    smoothing_ms: Finite.min(0).max(MAX_SMOOTHING_MS).default(0).describe(`Time constant of the smoothing, ms (onset/beat: their decay). Default 0`),
  })
  .strict()
  .superRefine((m, ctx) => {
    for (const [field, message] of mappingProblems(m, (k) => HOT_KEYS.has(k as keyof EngineParams))) {
      const path = field.startsWith('range[') ? ['range', Number(field.slice(6, -1))] : [field];
      ctx.addIssue({ code: 'custom', path, message });
    }
  });
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
    num_inference_steps: SafeInt.optional().describe(`Default 50. ${BOUND_REASONS.steps}`),
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
    similar_image_filter_max_skip_frame: SafeInt.optional().describe(`Default 10. ${BOUND_REASONS.maxSkip}`),
    skip_diffusion: z.boolean().optional(),
    image_preprocessing: ProcessingBlockSchema.nullable().optional(),
    image_postprocessing: ProcessingBlockSchema.nullable().optional(),
    latent_preprocessing: ProcessingBlockSchema.nullable().optional(),
    latent_postprocessing: ProcessingBlockSchema.nullable().optional(),
    controlnets: z.array(ControlNetSchema).max(8).optional(),
    ip_adapter: IpAdapterSchema.nullable().optional(),
    ip_adapter_style_image_url: HttpsUrl.nullable().optional(),
    audio_mappings: z
      .array(AudioMappingSchema)
      .max(MAX_AUDIO_MAPPINGS, `at most ${MAX_AUDIO_MAPPINGS} mappings`)
      .optional()
      .describe('Hot params that follow the stream\'s audio, set by the media node on every frame ([] clears). Hot'),
  })
  .strict();
export type ParamsInput = z.infer<typeof ParamsInputSchema>;
/** The schema's output is a params patch: a field the params module does not know stops compiling. */
export const PARAMS_INPUT_SATISFIES_PATCH: z.ZodType<ParamsPatch<ModelId>> = ParamsInputSchema;


// ───────────────────────────── the public view

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
    audio_mappings: z
      .array(z.object({ source: z.enum(AUDIO_SOURCES), feature: z.enum(AUDIO_FEATURES), param: z.string(), range: z.tuple([z.number(), z.number()]), smoothing_ms: z.number() }))
      .optional()
      .describe(`${UNSET} (no param follows the audio)`),
  })
  .meta({ id: 'StreamParams' });



// ───────────────────────────── hashing

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

/**
 * Sound-reactive params: a stream param `audio_mappings` maps a feature of the stream's audio (the
 * publisher's, or the soundtrack's take) to one hot param, which the media node sets on every
 * output frame from the audio of that frame's time (media/stream/AudioMappings.ts). Only hot params that
 * are a single number can be mapped; a reload-class param would rebuild the pipeline on every frame.
 */
// Self-contained: StreamParams.ts and UpdatePlan.ts import this file (the hot keys come as an argument).

/** Whose audio: the publisher's (decoded from its Opus) or the soundtrack's take at its play position. */
export const AUDIO_SOURCES = ['publisher', 'soundtrack'] as const;
export type AudioSource = (typeof AUDIO_SOURCES)[number];

/**
 * - `rms`: loudness of the whole band, 0 at −60 dBFS or below, 1 at full scale (linear in dB);
 * - `band:low` / `band:mid` / `band:high`: the same for below 150 Hz, 150 Hz–4 kHz, above 4 kHz;
 * - `onset`: an attack (energy jumping ≥ 12 dB over the last 200 ms): 1 at the onset, then 0;
 * - `beat`: an onset in the low band (a kick drum): 1 at the beat, then 0.
 */
export const AUDIO_FEATURES = ['rms', 'onset', 'band:low', 'band:mid', 'band:high', 'beat'] as const;
export type AudioFeature = (typeof AUDIO_FEATURES)[number];

/** Mappings a stream may hold: each costs a feature extractor per source on the node. */
export const MAX_AUDIO_MAPPINGS = 4;
/** Longest smoothing, ms: slower than this is no longer "following the sound". */
export const MAX_SMOOTHING_MS = 10_000;

export interface AudioMapping {
  source: AudioSource;
  feature: AudioFeature;
  /** A mappable param path (MAPPABLE_PARAMS): `guidance_scale`, `prompt_weights[1]`, `controlnets[0].conditioning_scale`… */
  param: string;
  /** The param at feature 0 and at feature 1 (min > max inverts); seed: the seeds picked from, inclusive. */
  range: [number, number];
  /** Time constant of the exponential smoothing of the feature, ms (0: none); onset/beat decay over it. */
  smoothing_ms: number;
}

/** Largest float32 magnitude: the engine feeds these params to float32 tensors. */
const FLOAT32_MAX = 3.4028234663852886e38;

/** A parsed param path: which param, and the index of a list entry. */
export type MappedParam =
  | { kind: 'guidance_scale' | 'delta' | 'seed' }
  | { kind: 'prompt_weights'; index: number }
  | { kind: 'conditioning_scale'; index: number };

/** The mappable params and the bounds of their values (what `range` is checked against). */
export const MAPPABLE_PARAMS: Readonly<Record<MappedParam['kind'], { path: string; min: number; max: number; integer: boolean }>> = {
  guidance_scale: { path: 'guidance_scale', min: -FLOAT32_MAX, max: FLOAT32_MAX, integer: false },
  delta: { path: 'delta', min: -FLOAT32_MAX, max: FLOAT32_MAX, integer: false },
  seed: { path: 'seed', min: -Number.MAX_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER, integer: true },
  // Blend weights are normalised by their sum, which negative weights can bring to zero.
  prompt_weights: { path: 'prompt_weights[i]', min: 0, max: FLOAT32_MAX, integer: false },
  conditioning_scale: { path: 'controlnets[i].conditioning_scale', min: -FLOAT32_MAX, max: FLOAT32_MAX, integer: false },
};

const MAPPABLE_LIST = Object.values(MAPPABLE_PARAMS)
  .map((m) => m.path)
  .join(', ');

/**
 * Parses a param path, or says why it cannot be mapped; `hot` tells a hot key from a reload-class
 * one (UpdatePlan's HOT_KEYS), for the message.
 */
export function parseMappedParam(path: string, hot: (key: string) => boolean = () => true): MappedParam | { error: string } {
  if (path === 'guidance_scale' || path === 'delta' || path === 'seed') return { kind: path };
  let m = /^prompt_weights\[(\d{1,2})\]$/.exec(path);
  if (m) return { kind: 'prompt_weights', index: Number(m[1]) };
  m = /^controlnets\[(\d{1,2})\]\.conditioning_scale$/.exec(path);
  if (m) return { kind: 'conditioning_scale', index: Number(m[1]) };
  const key = /^[a-z_]+/.exec(path)?.[0] ?? '';
  if (KNOWN_KEYS.has(key)) {
    if (!hot(key) && key !== 'controlnets') {
      return { error: `${key} is not a hot parameter (changing it reloads the pipeline), so it cannot follow sound; mappable: ${MAPPABLE_LIST}` };
    }
    return { error: `${path} cannot be mapped (only single numbers can follow sound); mappable: ${MAPPABLE_LIST}` };
  }
  return { error: `unknown parameter ${JSON.stringify(path)}; mappable: ${MAPPABLE_LIST}` };
}

/** Every StreamParams key (to tell a reload-class param from a typo). */
const KNOWN_KEYS: ReadonlySet<string> = new Set([
  'model_id', 'prompt', 'prompt_interpolation_method', 'normalize_prompt_weights', 'normalize_seed_weights', 'negative_prompt',
  'guidance_scale', 'delta', 'num_inference_steps', 't_index_list', 'use_safety_checker', 'safety_checker_threshold', 'width',
  'height', 'lora_dict', 'use_lcm_lora', 'lcm_lora_id', 'acceleration', 'use_denoising_batch', 'do_add_noise', 'seed',
  'seed_interpolation_method', 'enable_similar_image_filter', 'similar_image_filter_threshold', 'similar_image_filter_max_skip_frame',
  'skip_diffusion', 'image_preprocessing', 'image_postprocessing', 'latent_preprocessing', 'latent_postprocessing', 'controlnets',
  'ip_adapter', 'ip_adapter_style_image_url', 'cached_attention', 'cfg_type', 'audio_mappings',
]);

/**
 * What is wrong with one mapping on its own (param path, feature for the param, range against the
 * param's bounds): `[field under the mapping, message]`, empty when fine.
 */
export function mappingProblems(m: AudioMapping, hot?: (key: string) => boolean): [string, string][] {
  const parsed = parseMappedParam(m.param, hot);
  if ('error' in parsed) return [['param', parsed.error]];
  const out: [string, string][] = [];
  if (parsed.kind === 'seed' && m.feature !== 'onset' && m.feature !== 'beat') {
    out.push(['feature', `seed changes on events: map it from onset or beat (got ${m.feature})`]);
  }
  const b = MAPPABLE_PARAMS[parsed.kind];
  m.range.forEach((v, i) => {
    if (!Number.isFinite(v) || v < b.min || v > b.max) out.push([`range[${i}]`, `${v} is outside ${m.param}'s bounds [${b.min}, ${b.max}]`]);
    else if (b.integer && !Number.isInteger(v)) out.push([`range[${i}]`, `${m.param} takes integers (got ${v})`]);
  });
  if (parsed.kind === 'seed' && m.range[0] > m.range[1]) out.push(['range', 'a seed range is [lowest, highest]']);
  return out;
}

/** What the merged params make of the mappings' list indices (a prompt weight needs a weighted prompt with that entry…). */
export function mappingTargetProblem(m: AudioMapping, p: { prompt: string | [string, number][]; controlnets: readonly unknown[] }): string | null {
  const parsed = parseMappedParam(m.param);
  if ('error' in parsed) return parsed.error;
  if (parsed.kind === 'prompt_weights') {
    const n = typeof p.prompt === 'string' ? 0 : p.prompt.length;
    if (parsed.index >= n) return `needs a weighted prompt list with an entry ${parsed.index} (the prompt has ${n === 0 ? 'no list' : `${n} entries`})`;
  }
  if (parsed.kind === 'conditioning_scale' && parsed.index >= p.controlnets.length) {
    return `needs a ControlNet ${parsed.index} (the stream has ${p.controlnets.length})`;
  }
  return null;
}

/**
 * Hot or reload, per key (reference/live-diffusion.md §2.4): the one table the API answers
 * `x-params-update` from and the engine acts on, so the two cannot disagree.
 */
import { paramsWork } from './ParamsWork.ts';
import { outputScale, type StreamParams } from './StreamParams.ts';

/**
 * Keys applied on the next frame without a reload: the spec's PATCH list, with the details of
 * ai-runner's `_update_params_dynamic` (prompt/seed blending settings, the safety checker and its
 * threshold, the processing chains). Three keys have a rule of their own (planUpdate): an
 * `image_postprocessing` change of the output scale reloads, `controlnets` is hot only for
 * conditioning_scale / preprocessor_params on the same list, `cached_attention` reloads when it is
 * switched on or off. `ip_adapter` is hot whatever changes, adding and removing it included (spec:
 * "fully hot-swappable"). Everything else reloads.
 */
export const HOT_KEYS: ReadonlySet<keyof StreamParams> = new Set<keyof StreamParams>([
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
  'safety_checker_threshold',
  'ip_adapter',
  'ip_adapter_style_image_url',
  'image_preprocessing',
  'image_postprocessing',
  'latent_preprocessing',
  'latent_postprocessing',
  'cfg_type',
  // The node reads it (media/stream/AudioMappings.ts); the engine never sees it.
  'audio_mappings',
]);

/**
 * - `none`: nothing changed (not sent to the node);
 * - `hot`: only hot keys changed; applied on the next frame;
 * - `reload`: at least one key needs a pipeline reload; the whole update rides with it.
 */
export type UpdateMode = 'none' | 'hot' | 'reload';

export interface UpdatePlan {
  mode: UpdateMode;
  /** Changed keys applied on the next frame. */
  hot: (keyof StreamParams)[];
  /** Changed keys that rebuild the pipeline. */
  reload: (keyof StreamParams)[];
}

/** JSON with object keys sorted at every level (ai-runner hashes `json.dumps(sort_keys=True)`). */
export function stableJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return v;
  });
}

const same = (a: unknown, b: unknown) => stableJson(a) === stableJson(b);

/** Hot or reload for each key whose value differs between `before` and `after` (both merged, full params). */
export function planUpdate(before: StreamParams, after: StreamParams): UpdatePlan {
  paramsWork.plans++;
  const hot: (keyof StreamParams)[] = [];
  const reload: (keyof StreamParams)[] = [];
  const keys = new Set([...Object.keys(before), ...Object.keys(after)] as (keyof StreamParams)[]);
  for (const key of keys) {
    if (same(before[key], after[key])) continue;
    let isHot = HOT_KEYS.has(key);
    if (key === 'controlnets') {
      // conditioning_scale and preprocessor_params are hot; the rest of an entry reloads.
      const strip = (list: StreamParams['controlnets']) => list.map(({ conditioning_scale: _s, preprocessor_params: _p, ...rest }) => rest);
      isHot = before.controlnets.length === after.controlnets.length && same(strip(before.controlnets), strip(after.controlnets));
    } else if (key === 'cached_attention') {
      isHot = (before.cached_attention?.enabled ?? false) === (after.cached_attention?.enabled ?? false);
    } else if (key === 'image_postprocessing') {
      isHot = outputScale(before.image_postprocessing) === outputScale(after.image_postprocessing);
    }
    (isHot ? hot : reload).push(key);
  }
  return { mode: reload.length > 0 ? 'reload' : hot.length > 0 ? 'hot' : 'none', hot, reload };
}

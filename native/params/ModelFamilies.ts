/**
 * Which base model belongs to which family, and which ControlNets / IP-Adapter each family accepts
 * (ai-runner `MODEL_ID_TO_TYPE` / `CONTROLNETS_BY_TYPE`, reference/live-diffusion.md §2.3). One
 * table for the API and the engine, so both refuse the same things.
 */

/**
 * - `sd21`: SD 2.1 (sd-turbo), D=1024.
 * - `sd15`: SD 1.5 fine-tunes, D=768.
 * - `sdxl`: SDXL (sdxl-turbo), D=2048 + pooled text embeds.
 */
export type ModelFamily = 'sd21' | 'sd15' | 'sdxl';

/** The base models the API serves (Daydream's four). The engine also loads other ids (demo, custom). */
export const MODEL_IDS = ['stabilityai/sd-turbo', 'stabilityai/sdxl-turbo', 'Lykon/dreamshaper-8', 'prompthero/openjourney-v4'] as const;
export type ModelId = (typeof MODEL_IDS)[number];

export interface ModelEntry {
  family: ModelFamily;
  ipAdapter: boolean;
  cachedAttention: boolean;
  /** The deprecated `pipeline_id` that names this model (also reported as status `pipeline_id`). */
  legacyPipelineId: string;
}

export const MODELS: Readonly<Record<ModelId, ModelEntry>> = Object.freeze({
  'stabilityai/sd-turbo': { family: 'sd21', ipAdapter: false, cachedAttention: false, legacyPipelineId: 'pip_SD-turbo' },
  'stabilityai/sdxl-turbo': { family: 'sdxl', ipAdapter: true, cachedAttention: true, legacyPipelineId: 'pip_SDXL-turbo' },
  'Lykon/dreamshaper-8': { family: 'sd15', ipAdapter: true, cachedAttention: true, legacyPipelineId: 'pip_SD15' },
  'prompthero/openjourney-v4': { family: 'sd15', ipAdapter: true, cachedAttention: true, legacyPipelineId: 'pip_SD15-openjourney' },
});

export function isModelId(id: string): id is ModelId {
  return (MODEL_IDS as readonly string[]).includes(id);
}

export const MODEL_FAMILY: Readonly<Record<string, ModelFamily>> = Object.freeze(Object.fromEntries(MODEL_IDS.map((id) => [id, MODELS[id].family])));

export const CONTROLNETS_BY_FAMILY: Readonly<Record<ModelFamily, readonly string[]>> = Object.freeze({
  sd21: Object.freeze([
    'thibaud/controlnet-sd21-openpose-diffusers',
    'thibaud/controlnet-sd21-hed-diffusers',
    'thibaud/controlnet-sd21-canny-diffusers',
    'thibaud/controlnet-sd21-depth-diffusers',
    'thibaud/controlnet-sd21-color-diffusers',
    'daydreamlive/TemporalNet2-stable-diffusion-2-1',
  ]),
  sd15: Object.freeze([
    'lllyasviel/control_v11f1p_sd15_depth',
    'lllyasviel/control_v11f1e_sd15_tile',
    'lllyasviel/control_v11p_sd15_canny',
    'daydreamlive/TemporalNet2-stable-diffusion-v1-5',
  ]),
  sdxl: Object.freeze([
    'xinsir/controlnet-depth-sdxl-1.0',
    'xinsir/controlnet-canny-sdxl-1.0',
    'xinsir/controlnet-tile-sdxl-1.0',
    'daydreamlive/TemporalNet2-stable-diffusion-xl-base-1.0',
  ]),
});

/**
 * ControlNets the API knows but this engine refuses, with the reason (a 400 naming the field).
 * TemporalNet2 conditions on 6 channels (the previous output frame and the optical flow to the
 * current one); we compute no flow yet and feeding it 3 channels would be wrong, not degraded.
 */
export const REFUSED_CONTROLNETS: Readonly<Record<string, string>> = Object.freeze(
  Object.fromEntries(
    ['daydreamlive/TemporalNet2-stable-diffusion-2-1', 'daydreamlive/TemporalNet2-stable-diffusion-v1-5', 'daydreamlive/TemporalNet2-stable-diffusion-xl-base-1.0'].map((id) => [
      id,
      'TemporalNet2 needs a 6-channel condition (previous frame + optical flow) that this runtime does not compute yet',
    ]),
  ),
);

/** ControlNet ids of `modelId` that this engine runs (controlNetsFor minus REFUSED_CONTROLNETS). */
export function runnableControlNetsFor(modelId: string): string[] {
  return controlNetsFor(modelId).filter((id) => !(id in REFUSED_CONTROLNETS));
}

/** Most ControlNets enabled at once per family (SDXL: 3, ai-runner); undefined = no limit. */
export const MAX_ENABLED_CONTROLNETS: Readonly<Partial<Record<ModelFamily, number>>> = Object.freeze({ sdxl: 3 });

/** Families whose models accept an IP-Adapter (h94 sd15 / sdxl weights exist; not SD 2.1). */
export const IP_ADAPTER_FAMILIES: ReadonlySet<ModelFamily> = new Set<ModelFamily>(['sd15', 'sdxl']);

/** Every ControlNet id the API knows (all families). */
export const CONTROLNET_IDS = [...CONTROLNETS_BY_FAMILY.sd21, ...CONTROLNETS_BY_FAMILY.sd15, ...CONTROLNETS_BY_FAMILY.sdxl] as [string, ...string[]];

/** The family of a base model id; null for ids outside Daydream's four (custom/demo models). */
export function familyOf(modelId: string): ModelFamily | null {
  return MODEL_FAMILY[modelId] ?? null;
}

/**
 * ControlNet ids allowed on `modelId`. Unknown base models (local/demo ids) get the union of all
 * families: the engine then relies on the files present on disk.
 */
export function controlNetsFor(modelId: string): readonly string[] {
  const f = familyOf(modelId);
  return f ? CONTROLNETS_BY_FAMILY[f] : Object.values(CONTROLNETS_BY_FAMILY).flat();
}

/** Whether `modelId` may use an IP-Adapter; unknown (local/demo) ids are allowed. */
export function supportsIpAdapter(modelId: string): boolean {
  const f = familyOf(modelId);
  return f === null || IP_ADAPTER_FAMILIES.has(f);
}

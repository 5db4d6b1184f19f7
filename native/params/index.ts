/**
 * native/params: the stream params vocabulary every layer shares — the one `StreamParams` type,
 * its defaults and merge, the model / ControlNet / IP-Adapter tables, the rules (`checkParams`,
 * issues for the API; `assertParams`, a throw for the engine) and the hot/reload plan of an
 * update (`planUpdate`), and a change as one value planned once (`ParamsChange`). It loads no model
 * runtime: the API imports it alone.
 */
export {
  type StreamParams,
  type ParamsPatch,
  type ProcessingBlock,
  type ProcessingBlockPatch,
  type ProcessorParams,
  type ControlNetParams,
  type ControlNetPatch,
  type IpAdapterParams,
  type IpAdapterPatch,
  type CachedAttention,
  type CfgType,
  type Acceleration,
  type InterpolationMethod,
  type ParamIssue,
  type CheckContext,
  DEFAULT_PARAMS,
  IP_ADAPTER_DEFAULTS,
  IP_ADAPTER_WEIGHT_TYPES,
  CONTROLNET_DEFAULTS,
  mergeParams,
  checkParams,
  assertParams,
  checkControlNetPreprocessor,
  outputScale,
} from './StreamParams.ts';
export {
  type AudioMapping,
  type AudioSource,
  type AudioFeature,
  type MappedParam,
  AUDIO_SOURCES,
  AUDIO_FEATURES,
  MAX_AUDIO_MAPPINGS,
  MAX_SMOOTHING_MS,
  MAPPABLE_PARAMS,
  parseMappedParam,
  mappingProblems,
} from './AudioMapping.ts';
export { HOT_KEYS, planUpdate, stableJson, type UpdateMode, type UpdatePlan } from './UpdatePlan.ts';
export { hotPart, paramsWork, planChange, type ParamsChange } from './ParamsChange.ts';
export {
  type ModelFamily,
  type ModelId,
  type ModelEntry,
  MODEL_IDS,
  MODELS,
  isModelId,
  MODEL_FAMILY,
  CONTROLNETS_BY_FAMILY,
  CONTROLNET_IDS,
  MAX_ENABLED_CONTROLNETS,
  IP_ADAPTER_FAMILIES,
  REFUSED_CONTROLNETS,
  familyOf,
  controlNetsFor,
  runnableControlNetsFor,
  supportsIpAdapter,
} from './ModelFamilies.ts';
export { MAX_FRAME_SIDE } from '../processors/Upscale.ts';
export { IMAGE_PROCESSOR_TYPES, LATENT_PROCESSOR_TYPES, processorParamSchemas } from '../processors/ProcessorChain.ts';
export { PREPROCESSOR_PARAMS } from '../preprocessors/ModelPreprocessor.ts';
export {
  CONTROLNET_PREPROCESSORS,
  IMAGE_CONTROLNET_PREPROCESSORS,
  MODEL_PREPROCESSOR_NAMES,
  isControlNetPreprocessor,
  preprocessorRefusal,
  type ControlNetPreprocessorName,
} from '../preprocessors/ControlNetPreprocessors.ts';

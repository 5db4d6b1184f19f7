/**
 * native/: the inference engine. Public API for the media node and the control plane.
 */
export type { Frame, LatentTensor } from './Frame.ts';
export { createFrame, assertFrame } from './Frame.ts';
export {
  createFramePipeline,
  type FramePipeline,
  type FramePipelineOptions,
  type FramePipelineState,
  type FramePipelineStatus,
  type IpAdapterState,
  type StageMs,
} from './FramePipeline.ts';
export * from './params/index.ts';
export {
  createProcessorChain,
  IMAGE_PROCESSOR_TYPES,
  LATENT_PROCESSOR_TYPES,
  processorParamSchemas,
  type ProcessorChain,
  type ProcessingBlock,
  type ProcessorConfig,
} from './processors/ProcessorChain.ts';
export type { ProcessorKind, ImageProcessor, LatentProcessor } from './processors/Processor.ts';
export { type Acceleration, type ProviderName, type SessionSettings, type ModelInfo, providersFor } from './ModelSessions.ts';
export {
  buildTinyModel,
  buildTinyLora,
  DEMO_MODEL_IDS,
  DEMO_MODEL_VERSION,
  demoModelOptions,
  isCurrentDemoModel,
  type TinyModelOptions,
} from './tiny/TinyModelBuilder.ts';
export { type FetchImage, STYLE_IMAGE_TIMEOUT_MS } from './IpAdapter.ts';
export { PREPROCESSOR_PARAMS, parsePreprocessorParams } from './preprocessors/ModelPreprocessor.ts';
export { MODEL_PREPROCESSOR_NAMES, PREPROCESSOR_CONTRACTS, PreprocessorModel, type ModelPreprocessorName, type PreprocessorContract } from './preprocessors/PreprocessorModel.ts';
export { openModelPreprocessor } from './preprocessors/Preprocessors.ts';
export { buildTinyPreprocessors } from './tiny/TinyPreprocessors.ts';
export { readSafetensors, writeSafetensors, loraFile } from './LoraMerge.ts';
export {
  NativeError,
  type NativeErrorCode,
  UnsupportedProcessorError,
  InvalidProcessorParamsError,
  ModelLoadError,
  InvalidParamsError,
  InvalidStateError,
  InferenceError,
} from './errors.ts';

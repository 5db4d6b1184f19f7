/**
 * The ControlNet preprocessors this runtime runs: the one list that the API's validation, the
 * engine (ControlNet.open) and `GET /v1/capabilities` all read, so what is advertised is what is
 * accepted and what is accepted builds and runs. A name outside it is refused with a 400 naming
 * `params.controlnets[i].preprocessor`; Daydream's other names (ai-runner's ImageProcessorName:
 * depth, hed, openpose, mediapipe_*, lineart, temporal_net_tensorrt, external …) are refused as
 * "not supported by this runtime", since we have no implementation of them.
 *
 * No heavy imports: the API loads this without ONNX Runtime.
 */

/**
 * Image processors (native/processors, the ProcessorChain registry) that make a control image at
 * the frame's size. `upscale` is an image processor but not a preprocessor: a ControlNet needs its
 * condition at the latent's size.
 */
export const IMAGE_CONTROLNET_PREPROCESSORS = ['passthrough', 'canny', 'feedback', 'blur', 'sharpen'] as const;

/** Preprocessors backed by an ONNX model each (PreprocessorModel's PREPROCESSOR_CONTRACTS). */
export const MODEL_PREPROCESSOR_NAMES = ['depth_tensorrt', 'pose_tensorrt', 'soft_edge'] as const;
export type ModelPreprocessorName = (typeof MODEL_PREPROCESSOR_NAMES)[number];

/** Every preprocessor name a ControlNet entry may take here. Default `passthrough`. */
export const CONTROLNET_PREPROCESSORS = [...IMAGE_CONTROLNET_PREPROCESSORS, ...MODEL_PREPROCESSOR_NAMES] as const;
export type ControlNetPreprocessorName = (typeof CONTROLNET_PREPROCESSORS)[number];

/**
 * Daydream's ImageProcessorName (reference: ai-runner's schema): the names a client written
 * against Daydream may send. Used only to word a refusal ("not supported" rather than "unknown").
 */
export const DAYDREAM_IMAGE_PROCESSOR_NAMES: readonly string[] = Object.freeze([
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
  'passthrough',
  'pose_tensorrt',
  'realesrgan_trt',
  'sharpen',
  'soft_edge',
  'standard_lineart',
  'temporal_net_tensorrt',
  'upscale',
]);

export function isControlNetPreprocessor(name: string): name is ControlNetPreprocessorName {
  return (CONTROLNET_PREPROCESSORS as readonly string[]).includes(name);
}

export function isModelPreprocessor(name: string): name is ModelPreprocessorName {
  return (MODEL_PREPROCESSOR_NAMES as readonly string[]).includes(name);
}

/** Why `name` is refused as a ControlNet preprocessor (the 400's message). */
export function preprocessorRefusal(name: string): string {
  const supported = CONTROLNET_PREPROCESSORS.join(', ');
  return DAYDREAM_IMAGE_PROCESSOR_NAMES.includes(name)
    ? `${name} is not supported as a ControlNet preprocessor by this runtime (supported: ${supported})`
    : `unknown ControlNet preprocessor ${JSON.stringify(name)} (supported: ${supported})`;
}

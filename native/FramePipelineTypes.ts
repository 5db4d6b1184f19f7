/**
 * What a frame pipeline is built from and reports (its options, state and status), apart from the
 * pipeline itself so the thread that hosts a built pipeline (EngineThread) and the pipeline that
 * drives the hosts (FramePipeline) can both name them without importing each other.
 */
import type { Logger } from 'pino';
import type { ImageLimits } from '../images/index.ts';
import type { FetchImage } from './IpAdapter.ts';
import type { ProviderName, SessionSettings } from './ModelSessions.ts';
import type { ParamsPatch } from './params/index.ts';

export interface FramePipelineOptions {
  /** Root holding one folder per model_id (`<modelsDir>/<model_id>/unet/model.onnx`, …). */
  modelsDir: string;
  /** Initial params; missing keys take Daydream's defaults. */
  params: ParamsPatch;
  /** Forces one execution provider instead of deriving it from `acceleration`. */
  provider?: ProviderName;
  logger: Logger;
  /** ONNX Runtime tuning. */
  settings?: SessionSettings;
  /**
   * Downloads the IP-Adapter style image (http/https URLs). native/ imports nothing internal but
   * the images/ leaf: the caller passes its SSRF-safe client here and must honour
   * `maxBytes`/`timeoutMs` (imageLimits.maxBytes, 5 s); both are checked again on the result.
   * Without it only data: URLs and raw base64 work.
   */
  fetchImage?: FetchImage;
  /**
   * Caps on decoding the style image (the operator's IMAGE_* settings; default
   * DEFAULT_IMAGE_LIMITS). Each engine decodes with its own decoder, one image at a time.
   */
  imageLimits?: ImageLimits;
}

/**
 * - `off`: no ip_adapter requested (or disabled, or scale 0).
 * - `loading`: the style image is being fetched/encoded; frames run without it meanwhile.
 * - `ready`: its tokens are applied.
 * - `error`: the last fetch/encode failed (see `ipAdapterError`); frames run without it.
 */
export type IpAdapterState = 'off' | 'loading' | 'ready' | 'error';

/**
 * - `ready`: serving frames.
 * - `reloading`: serving frames with the old pipeline while a new one is built.
 * - `closed`: after close().
 */
export type FramePipelineState = 'ready' | 'reloading' | 'closed';

/** Milliseconds spent per stage on the last processed frame. */
export interface StageMs {
  preprocess: number;
  encode: number;
  unet: number;
  math: number;
  decode: number;
  /** ControlNet preprocessors (part of `unet`, which includes the ControlNet runs). */
  control: number;
  postprocess: number;
  /** Sum of the raw ONNX Runtime `run` calls inside this frame (orchestration overhead = total − ort). */
  ort: number;
  total: number;
}

/** A type, not an interface: it passes as the frame processor seam's untyped status (FrameProcessor.status). */
export type FramePipelineStatus = {
  state: FramePipelineState;
  modelId: string;
  /** The loaded model is a tiny random-weight demo model (model_index.json `_demo`). */
  demo: boolean;
  /** Requested Daydream acceleration. */
  acceleration: string;
  /** Execution providers the sessions really use ([] with skip_diffusion: no model loaded). */
  providers: ProviderName[];
  /** Why the providers differ from what `acceleration` asked for, or null. */
  providerNote: string | null;
  /** Reloads attempted since creation (successful or not). */
  restartCount: number;
  lastRestartTime: number | null;
  /** Log lines of the last reload. */
  lastRestartLogs: string[];
  lastError: string | null;
  lastErrorTime: number | null;
  /** Stream Batch output lag in frames. */
  lag: number;
  framesIn: number;
  framesOut: number;
  /** Frames dropped by the similarity filter. */
  framesSkipped: number;
  /** Output frames the safety checker flagged and blanked (black). */
  framesBlocked: number;
  /**
   * Model-backed ControlNet preprocessors loaded: which, whether a demo model, and the providers
   * they really run on (a `_tensorrt` name falls back, with `providerNote` saying so).
   */
  preprocessors: { preprocessor: string; controlnet: string; demo: boolean; providers: ProviderName[]; providerNote: string | null }[];
  ipAdapter: IpAdapterState;
  ipAdapterError: string | null;
  stageMs: StageMs;
  /** Params the engine accepts but cannot honour yet (ControlNet, IP-Adapter, …): never silent. */
  unsupported: string[];
  /**
   * Why the pipeline the params ask for could not be built, while an older one (or, when even the
   * first build failed, the image processors alone: `fallback`) keeps serving; null once a build
   * of the requested params succeeds. The stream never goes dark for a build failure.
   */
  buildError: string | null;
  /**
   * - `none`: serving the pipeline built for the requested params (or a reload is in flight);
   * - `previous`: a reload failed; the previously built pipeline keeps serving;
   * - `processors`: the first build failed; image pre/post-processing alone (skip_diffusion) serve.
   */
  fallback: 'none' | 'previous' | 'processors';
  /**
   * How often the engine's thread merged, checked and planned params (native/params ParamsWork):
   * a change reaches the engine planned, so updates add nothing here; a build checks its params once.
   */
  paramsWork?: { merges: number; checks: number; plans: number };
};

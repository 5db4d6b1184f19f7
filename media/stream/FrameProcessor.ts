/**
 * The seam between the live path and the inference engine: decoded RGB frames go in, processed
 * frames come out. The media node never queues more than one frame in front of a processor (latest
 * frame wins), so `process` may take as long as it needs; slow processing lowers output fps, it
 * never adds latency.
 *
 * The default processor applies native's image processor chains around an optional diffusion
 * stage; native's FramePipeline (the whole StreamDiffusion frame pipeline) is one as it is.
 */
import type { Logger } from 'pino';
import type { StreamParams as FullParams, ParamsChange, UpdatePlan } from '../../native/params/index.ts';
import { frameBytes, type Frame, type PixelFormat } from '../Frame.ts';

export { frameBytes, type Frame, type PixelFormat };

/**
 * Stream params as the live path holds them: the params module's one type, with the keys known so
 * far (the store's full params once a publisher's grant arrived; a stream a viewer made holds only
 * the PATCHed keys until then), and as a patch (only the keys that change). The live path itself
 * reads `width` and `height` (default 512 px), `skip_diffusion` and the image chains.
 */
export type LiveParams = Partial<FullParams>;

type ProcessingBlock = NonNullable<FullParams['image_preprocessing']>;

export interface FrameProcessor {
  /** Returns the processed frame, or null to drop this frame (nothing is sent for it). */
  process(frame: Frame): Promise<Frame | null>;
  /**
   * Applies a change planned where it was asked for (ParamsChange), as it is, from the next frame
   * on: the hot keys' values from `target`, and (an engine) a rebuild for the reload keys. Returns
   * the plan it ran: what the API reports for the update. A processor with no plan of its own
   * returns nothing (the API then reports its own).
   */
  update(change: ParamsChange): UpdatePlan | void;
  close(): void;
  /** Engine state for the status endpoint (restarts, provider, demo flag…), when there is one. */
  status?(): Record<string, unknown>;
  /**
   * Hands an output frame back once it has been encoded (the encoders copy what they are given),
   * so the engine can reuse its buffer instead of allocating one per frame. The caller must not
   * read the frame afterwards.
   */
  release?(frame: Frame): void;
}

/** Diffusion stage plugged in by the caller (native's createFramePipeline, wrapped). */
export interface ProcessorContext {
  streamId: string;
  logger: Logger;
}

/**
 * Builds a stream's processor. `passthrough(params)`, when the factory has it, says that a
 * processor built for these params would return every frame unchanged: the stream then builds
 * none (no worker threads, no model load) and sends decoded frames to the encoder as they are,
 * in I420 without the RGB round trip. Without it every stream gets a processor.
 */
export type FrameProcessorFactory = ((params: LiveParams, ctx: ProcessorContext) => Promise<FrameProcessor>) & {
  passthrough?: (params: LiveParams) => boolean;
};

/** True when an image processing block has at least one enabled processor. */
export function chainActive(block: ProcessingBlock | null | undefined): boolean {
  return !!block && block.enabled !== false && block.processors.some((p) => p.enabled !== false);
}

/** Image chains only: nothing to do when neither chain has an enabled processor. */
export function imageChainsIdle(params: LiveParams): boolean {
  return !chainActive(params.image_preprocessing) && !chainActive(params.image_postprocessing);
}

interface ImageChain {
  readonly empty: boolean;
  apply(frame: Frame): Frame;
  observeOutput(frame: Frame): void;
  reset(): void;
}

type ChainFactory = (block: ProcessingBlock | null | undefined, kind: 'image') => ImageChain;

/**
 * image_preprocessing → image_postprocessing, without diffusion: what a node without models runs
 * (the diffusion path is native's FramePipeline, which runs these chains inside the engine). A
 * null factory passes frames through (benchmarks of the media path).
 */
export class ImageChainProcessor implements FrameProcessor {
  readonly #factory: ChainFactory | null;
  #pre: ImageChain | null = null;
  #post: ImageChain | null = null;

  constructor(factory: ChainFactory | null, params: LiveParams) {
    this.#factory = factory;
    this.#build(params, ['image_preprocessing', 'image_postprocessing']);
  }

  /** Builds both chains before swapping, so a bad block leaves the old chains serving. */
  #build(params: LiveParams, keys: readonly (keyof FullParams)[]): void {
    if (!this.#factory) return;
    const pre = keys.includes('image_preprocessing') ? this.#factory(params.image_preprocessing, 'image') : this.#pre;
    const post = keys.includes('image_postprocessing') ? this.#factory(params.image_postprocessing, 'image') : this.#post;
    this.#pre = pre;
    this.#post = post;
  }

  /** Image chains are rebuilt in place, nothing reloads: every key of the change applies on the next frame. */
  update(change: ParamsChange): UpdatePlan {
    const hot = [...change.plan.hot, ...change.plan.reload];
    this.#build(change.target, hot);
    return { mode: hot.length > 0 ? 'hot' : 'none', hot, reload: [] };
  }

  async process(frame: Frame): Promise<Frame | null> {
    const f = this.#pre && !this.#pre.empty ? this.#pre.apply(frame) : frame;
    const out = this.#post && !this.#post.empty ? this.#post.apply(f) : f;
    this.#pre?.observeOutput(out);
    this.#post?.observeOutput(out);
    return out;
  }

  /** Holds no threads, sessions or pooled frames (image chains allocate their own frames). */
  close(): void {
    this.#pre = null;
    this.#post = null;
  }
}

/** The image-chains-only factory (no diffusion): what a node without models runs. */
export const defaultProcessorFactory: FrameProcessorFactory = Object.assign(
  async (params: LiveParams) => {
    // The engine's entry loads ONNX Runtime: loaded with the first stream that processes frames.
    const { createProcessorChain } = await import('../../native/index.ts');
    return new ImageChainProcessor(createProcessorChain, params);
  },
  { passthrough: imageChainsIdle },
);

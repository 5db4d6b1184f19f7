/**
 * The live path's diffusion stage: native's StreamDiffusion frame pipeline (image pre-processing,
 * VAE encode, Stream Batch UNet, VAE decode, post-processing) behind the FrameProcessor seam.
 * Hot params apply on the next frame; reload params build a new pipeline in the background while
 * this one keeps serving (native/FramePipeline.ts), so `update` never blocks the frame loop.
 */
import type { FetchImage, FramePipeline, ParamsPatch } from '../../native/index.ts';
import type { UpdatePlan } from '../../native/params/index.ts';
import { imageChainsIdle, type Frame, type FrameProcessor, type FrameProcessorFactory, type LiveParams } from './FrameProcessor.ts';
import type { ImageLimits } from '../../images/index.ts';

export class DiffusionProcessor implements FrameProcessor {
  readonly #pipeline: FramePipeline;

  constructor(pipeline: FramePipeline) {
    this.#pipeline = pipeline;
  }

  process(frame: Frame): Promise<Frame | null> {
    return this.#pipeline.process(frame);
  }

  /** Throws (synchronously) on params the engine cannot use; the old pipeline keeps serving. Returns the engine's plan. */
  update(params: LiveParams): UpdatePlan {
    return this.#pipeline.update(params as ParamsPatch);
  }

  release(frame: Frame): void {
    this.#pipeline.release(frame);
  }

  close(): void {
    void this.#pipeline.close();
  }

  status(): Record<string, unknown> {
    return { ...this.#pipeline.status() };
  }
}

/**
 * Builds each stream's diffusion pipeline from the models under `modelsDir`; `fetchImage` (the
 * caller's SSRF-safe client) downloads IP-Adapter style images.
 */
export function diffusionProcessorFactory(opts: { modelsDir: string; fetchImage?: FetchImage; imageLimits?: ImageLimits }): FrameProcessorFactory {
  const factory: FrameProcessorFactory = async (params, ctx) => {
    // The engine's entry loads ONNX Runtime: loaded with the first stream that runs diffusion.
    const { createFramePipeline } = await import('../../native/index.ts');
    return new DiffusionProcessor(
      await createFramePipeline({
        modelsDir: opts.modelsDir,
        params: params as ParamsPatch,
        logger: ctx.logger,
        ...(opts.fetchImage ? { fetchImage: opts.fetchImage } : {}),
        ...(opts.imageLimits ? { imageLimits: opts.imageLimits } : {}),
      }),
    );
  };
  // skip_diffusion with idle image chains: the pipeline would hand every frame back unchanged.
  factory.passthrough = (params) => params.skip_diffusion === true && imageChainsIdle(params);
  return factory;
}

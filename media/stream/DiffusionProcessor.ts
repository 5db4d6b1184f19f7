/**
 * The live path's diffusion stage: native's StreamDiffusion frame pipeline (image pre-processing,
 * VAE encode, Stream Batch UNet, VAE decode, post-processing) is a FrameProcessor as it is. Hot
 * params apply on the next frame; reload params build a new pipeline in the background while this
 * one keeps serving (native/FramePipeline.ts), so `update` never blocks the frame loop.
 */
import type { FetchImage } from '../../native/index.ts';
import type { ParamsPatch } from '../../native/params/index.ts';
import { imageChainsIdle, type FrameProcessorFactory } from './FrameProcessor.ts';
import type { ImageLimits } from '../../images/index.ts';

/**
 * Builds each stream's diffusion pipeline from the models under `modelsDir`; `fetchImage` (the
 * caller's SSRF-safe client) downloads IP-Adapter style images.
 */
export function diffusionProcessorFactory(opts: { modelsDir: string; fetchImage?: FetchImage; imageLimits?: ImageLimits }): FrameProcessorFactory {
  const factory: FrameProcessorFactory = async (params, ctx) => {
    // The engine's entry loads ONNX Runtime: loaded with the first stream that runs diffusion.
    const { createFramePipeline } = await import('../../native/index.ts');
    return createFramePipeline({
      modelsDir: opts.modelsDir,
      params: params as ParamsPatch,
      logger: ctx.logger,
      ...(opts.fetchImage ? { fetchImage: opts.fetchImage } : {}),
      ...(opts.imageLimits ? { imageLimits: opts.imageLimits } : {}),
    });
  };
  // skip_diffusion with idle image chains: the pipeline would hand every frame back unchanged.
  factory.passthrough = (params) => params.skip_diffusion === true && imageChainsIdle(params);
  return factory;
}

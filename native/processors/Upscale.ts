import { z } from 'zod';
import { resizeFrame } from '../FrameResize.ts';
import { defineProcessor } from './Processor.ts';

/**
 * Params of `upscale` (Daydream: `scale_factor`, default 2; changes the output size, so the API
 * treats toggling it as a reload). `scale` is accepted as an alias.
 */
export const upscaleParams = z.object({
  scale_factor: z.number().int().min(1).max(4).optional(),
  scale: z.number().int().min(1).max(4).optional(),
});

/**
 * Largest side, px, any processor chain may produce (twice the largest stream size): the API
 * refuses chains whose upscalers multiply past it, and the upscaler itself never goes beyond it,
 * so a chain costs at most 2048² pixels per frame whatever reaches the engine.
 */
export const MAX_FRAME_SIDE = 2048;

/** Bilinear upscale by an integer factor: the engine's resize (pixel centres aligned, edge clamped). */
export const upscale = defineProcessor({
  type: 'upscale',
  kind: 'image',
  params: upscaleParams,
  create: (p) => {
    const s = p.scale_factor ?? p.scale ?? 2;
    const process = (f: Parameters<typeof resizeFrame>[0]) => {
      const fit = Math.min(s, Math.floor(MAX_FRAME_SIDE / Math.max(f.width, f.height)));
      return fit <= 1 ? f : resizeFrame(f, f.width * fit, f.height * fit);
    };
    return { type: 'upscale', process, reset: () => {} };
  },
});

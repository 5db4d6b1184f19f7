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

/** Bilinear upscale by an integer factor: the engine's resize (pixel centres aligned, edge clamped). */
export const upscale = defineProcessor({
  type: 'upscale',
  kind: 'image',
  params: upscaleParams,
  create: (p) => {
    const s = p.scale_factor ?? p.scale ?? 2;
    return { type: 'upscale', process: (f) => (s === 1 ? f : resizeFrame(f, f.width * s, f.height * s)), reset: () => {} };
  },
});

import { z } from 'zod';
import type { Frame } from '../Frame.ts';
import { defineProcessor } from './Processor.ts';

/**
 * Params of `upscale` (Daydream: `scale_factor`, default 2; changes the output size, so the API
 * treats toggling it as a reload). `scale` is accepted as an alias.
 */
export const upscaleParams = z.object({
  scale_factor: z.number().int().min(1).max(4).optional(),
  scale: z.number().int().min(1).max(4).optional(),
});

/** Bilinear upscale by an integer factor (pixel centres aligned, edge clamped). */
export const upscale = defineProcessor({
  type: 'upscale',
  kind: 'image',
  params: upscaleParams,
  create: (p) => {
    const s = p.scale_factor ?? p.scale ?? 2;
    return { type: 'upscale', process: (f) => (s === 1 ? f : bilinearUpscale(f, s)), reset: () => {} };
  },
});

export function bilinearUpscale(f: Frame, s: number): Frame {
  const { width: w, height: h, data: src } = f;
  const W = w * s;
  const H = h * s;
  const out = new Uint8Array(W * H * 3);
  // Precompute the horizontal taps once per column.
  const x0s = new Int32Array(W);
  const x1s = new Int32Array(W);
  const fxs = new Float32Array(W);
  for (let X = 0; X < W; X++) {
    const sx = Math.min(Math.max((X + 0.5) / s - 0.5, 0), w - 1);
    const x0 = Math.floor(sx);
    x0s[X] = x0 * 3;
    x1s[X] = Math.min(x0 + 1, w - 1) * 3;
    fxs[X] = sx - x0;
  }
  let o = 0;
  for (let Y = 0; Y < H; Y++) {
    const sy = Math.min(Math.max((Y + 0.5) / s - 0.5, 0), h - 1);
    const y0 = Math.floor(sy);
    const fy = sy - y0;
    const r0 = y0 * w * 3;
    const r1 = Math.min(y0 + 1, h - 1) * w * 3;
    for (let X = 0; X < W; X++) {
      const a0 = x0s[X] as number;
      const a1 = x1s[X] as number;
      const fx = fxs[X] as number;
      for (let c = 0; c < 3; c++) {
        const top = (src[r0 + a0 + c] as number) * (1 - fx) + (src[r0 + a1 + c] as number) * fx;
        const bot = (src[r1 + a0 + c] as number) * (1 - fx) + (src[r1 + a1 + c] as number) * fx;
        out[o++] = (top * (1 - fy) + bot * fy + 0.5) | 0;
      }
    }
  }
  return { width: W, height: H, ptsMs: f.ptsMs, data: out };
}

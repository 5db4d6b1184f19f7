/**
 * Conversions between RGB24 frames and the NCHW float tensors the VAE takes ([-1,1], diffusers
 * VaeImageProcessor convention), and a bilinear resize for frames that arrive at another size.
 */
import type { Frame } from './Frame.ts';

/** RGB24 → [1,3,H,W] float32 in [-1,1]. */
export function frameToTensor(f: Frame): Float32Array {
  const n = f.width * f.height;
  const out = new Float32Array(3 * n);
  const d = f.data;
  for (let i = 0, j = 0; i < n; i++, j += 3) {
    out[i] = (d[j] as number) / 127.5 - 1;
    out[n + i] = (d[j + 1] as number) / 127.5 - 1;
    out[2 * n + i] = (d[j + 2] as number) / 127.5 - 1;
  }
  return out;
}

/** [1,3,H,W] in [-1,1] (clamped) → RGB24. */
export function tensorToFrame(x: Float32Array, width: number, height: number, ptsMs: number): Frame {
  const n = width * height;
  const data = new Uint8Array(3 * n);
  for (let i = 0, j = 0; i < n; i++, j += 3) {
    for (let c = 0; c < 3; c++) {
      const v = ((x[c * n + i] as number) + 1) * 127.5;
      data[j + c] = v <= 0 ? 0 : v >= 255 ? 255 : (v + 0.5) | 0;
    }
  }
  return { width, height, data, ptsMs };
}

/** Bilinear resize (pixel centres aligned); returns `f` itself when the size already matches. */
export function resizeFrame(f: Frame, width: number, height: number): Frame {
  if (f.width === width && f.height === height) return f;
  const { width: w, height: h, data: src } = f;
  const out = new Uint8Array(width * height * 3);
  const sx = w / width;
  const sy = h / height;
  let o = 0;
  for (let Y = 0; Y < height; Y++) {
    const fy = Math.min(Math.max((Y + 0.5) * sy - 0.5, 0), h - 1);
    const y0 = Math.floor(fy);
    const y1 = Math.min(y0 + 1, h - 1);
    const wy = fy - y0;
    for (let X = 0; X < width; X++) {
      const fx = Math.min(Math.max((X + 0.5) * sx - 0.5, 0), w - 1);
      const x0 = Math.floor(fx);
      const x1 = Math.min(x0 + 1, w - 1);
      const wx = fx - x0;
      for (let c = 0; c < 3; c++) {
        const a = src[(y0 * w + x0) * 3 + c] as number;
        const b = src[(y0 * w + x1) * 3 + c] as number;
        const cc = src[(y1 * w + x0) * 3 + c] as number;
        const d = src[(y1 * w + x1) * 3 + c] as number;
        out[o++] = ((a * (1 - wx) + b * wx) * (1 - wy) + (cc * (1 - wx) + d * wx) * wy + 0.5) | 0;
      }
    }
  }
  return { width, height, data: out, ptsMs: f.ptsMs };
}

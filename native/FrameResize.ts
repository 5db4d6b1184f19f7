/**
 * A bilinear resize for frames that arrive at another size than the stream's. (The RGB24 ↔ NCHW
 * float conversions that used to live here now run inside the VAE graphs: FusedVae.ts.)
 */
import type { Frame } from './Frame.ts';

/** Bilinear resize (pixel centres aligned); returns `f` itself when the size already matches. */
export function resizeFrame(f: Frame, width: number, height: number): Frame {
  if (f.width === width && f.height === height) return f;
  const { width: w, height: h, data: src } = f;
  const out = new Uint8Array(width * height * 3);
  const sx = w / width;
  const sy = h / height;
  // Horizontal taps are the same for every row: compute them once.
  const xo0 = new Int32Array(width);
  const xo1 = new Int32Array(width);
  const wxs = new Float64Array(width);
  for (let X = 0; X < width; X++) {
    const fx = Math.min(Math.max((X + 0.5) * sx - 0.5, 0), w - 1);
    const x0 = Math.floor(fx);
    xo0[X] = x0 * 3;
    xo1[X] = Math.min(x0 + 1, w - 1) * 3;
    wxs[X] = fx - x0;
  }
  let o = 0;
  for (let Y = 0; Y < height; Y++) {
    const fy = Math.min(Math.max((Y + 0.5) * sy - 0.5, 0), h - 1);
    const y0 = Math.floor(fy);
    const r0 = y0 * w * 3;
    const r1 = Math.min(y0 + 1, h - 1) * w * 3;
    const wy = fy - y0;
    for (let X = 0; X < width; X++) {
      const a0 = xo0[X] as number;
      const a1 = xo1[X] as number;
      const wx = wxs[X] as number;
      for (let c = 0; c < 3; c++) {
        const a = src[r0 + a0 + c] as number;
        const b = src[r0 + a1 + c] as number;
        const cc = src[r1 + a0 + c] as number;
        const d = src[r1 + a1 + c] as number;
        out[o++] = ((a * (1 - wx) + b * wx) * (1 - wy) + (cc * (1 - wx) + d * wx) * wy + 0.5) | 0;
      }
    }
  }
  return { width, height, data: out, ptsMs: f.ptsMs };
}

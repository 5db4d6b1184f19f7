import { z } from 'zod';
import { InvalidProcessorParamsError } from '../errors.ts';
import { defineProcessor } from './Processor.ts';

/**
 * Params of `canny`, with OpenCV `cv2.Canny` semantics (what controlnet_aux's CannyDetector calls):
 * thresholds on the L1 gradient magnitude |gx|+|gy| of a 3×3 Sobel over 8-bit luma.
 * Defaults 100/200 are Daydream's demo registry defaults.
 */
export const cannyParams = z.object({
  low_threshold: z.number().min(0).max(2040).default(100),
  high_threshold: z.number().min(0).max(2040).default(200),
});

/** Canny edge detector: white (255,255,255) edges on black, same size as the input. */
export const canny = defineProcessor({
  type: 'canny',
  kind: 'image',
  params: cannyParams,
  create: ({ low_threshold, high_threshold }) => {
    if (low_threshold > high_threshold) {
      throw new InvalidProcessorParamsError('canny', `low_threshold ${low_threshold} > high_threshold ${high_threshold}`);
    }
    // Per-instance scratch (4 float planes + marks + stack: ~5 MB at 512²), reused across frames.
    const scratch = new CannyScratch();
    return {
      type: 'canny',
      process: (f) => {
        const edges = cannyEdges(f.data, f.width, f.height, low_threshold, high_threshold, scratch);
        // The output is a new frame (it may leave the pipeline); only the scratch is reused.
        const out = new Uint8Array(f.width * f.height * 3);
        for (let i = 0, j = 0; i < edges.length; i++, j += 3) {
          if (edges[i] === 2) {
            out[j] = 255;
            out[j + 1] = 255;
            out[j + 2] = 255;
          }
        }
        return { width: f.width, height: f.height, ptsMs: f.ptsMs, data: out };
      },
      reset: () => {},
    };
  },
});

/** Working planes of one detector, sized for w·h pixels and reused while the size holds. */
export class CannyScratch {
  n = -1;
  gray = new Float32Array(0);
  gx = new Float32Array(0);
  gy = new Float32Array(0);
  mag = new Float32Array(0);
  mark = new Uint8Array(0);
  /** Pixels to visit in the hysteresis (each is pushed at most once: it is marked strong first). */
  stack = new Int32Array(0);

  size(n: number): this {
    if (n !== this.n) {
      this.n = n;
      this.gray = new Float32Array(n);
      this.gx = new Float32Array(n);
      this.gy = new Float32Array(n);
      this.mag = new Float32Array(n);
      this.mark = new Uint8Array(n);
      this.stack = new Int32Array(n);
    } else {
      this.mark.fill(0);
    }
    return this;
  }
}

/** 3×3 Sobel at (x, row y0) with the given neighbour rows and columns; writes gx, gy and |gx|+|gy|. */
function sobelAt(gray: Float32Array, gx: Float32Array, gy: Float32Array, mag: Float32Array, ym: number, y0: number, yp: number, x: number, xm: number, xp: number): void {
  const a = gray[ym + xm] as number, b = gray[ym + x] as number, c = gray[ym + xp] as number;
  const d = gray[y0 + xm] as number, f = gray[y0 + xp] as number;
  const g = gray[yp + xm] as number, hh = gray[yp + x] as number, k = gray[yp + xp] as number;
  const sx = c + 2 * f + k - a - 2 * d - g;
  const sy = g + 2 * hh + k - a - 2 * b - c;
  gx[y0 + x] = sx;
  gy[y0 + x] = sy;
  mag[y0 + x] = Math.abs(sx) + Math.abs(sy);
}

/** Returns a w×h map: 2 = edge, anything else = not. */
export function cannyEdges(rgb: Uint8Array, w: number, h: number, low: number, high: number, scratch = new CannyScratch()): Uint8Array {
  const n = w * h;
  const { gray, gx, gy, mag, mark, stack } = scratch.size(n);
  for (let i = 0, j = 0; i < n; i++, j += 3) {
    gray[i] = 0.299 * (rgb[j] as number) + 0.587 * (rgb[j + 1] as number) + 0.114 * (rgb[j + 2] as number);
  }
  // Sobel with replicated borders: the first and last columns clamp, the interior needs no test.
  // Sums of six float32 values with small integer weights are exact in doubles, so any order gives
  // the same gradients.
  for (let y = 0; y < h; y++) {
    const ym = (y > 0 ? y - 1 : 0) * w;
    const y0 = y * w;
    const yp = (y < h - 1 ? y + 1 : h - 1) * w;
    sobelAt(gray, gx, gy, mag, ym, y0, yp, 0, 0, Math.min(1, w - 1));
    // The 3×3 window slides right: each pixel loads only its new right-hand column.
    let a = gray[ym] as number, b = gray[ym + 1] as number;
    let d = gray[y0] as number, e = gray[y0 + 1] as number;
    let g = gray[yp] as number, hh = gray[yp + 1] as number;
    for (let x = 1; x < w - 1; x++) {
      const c = gray[ym + x + 1] as number, f = gray[y0 + x + 1] as number, k = gray[yp + x + 1] as number;
      const sx = c + 2 * f + k - a - 2 * d - g;
      const sy = g + 2 * hh + k - a - 2 * b - c;
      gx[y0 + x] = sx;
      gy[y0 + x] = sy;
      mag[y0 + x] = Math.abs(sx) + Math.abs(sy);
      a = b;
      b = c;
      d = e;
      e = f;
      g = hh;
      hh = k;
    }
    if (w > 1) sobelAt(gray, gx, gy, mag, ym, y0, yp, w - 1, w - 2, w - 1);
  }
  // Non-maximum suppression along the gradient direction quantised to 0/45/90/135 degrees.
  // Marks: 0 = none, 1 = weak candidate, 2 = strong (edge).
  const TAN22 = 0.41421356;
  const TAN67 = 2.41421356;
  let top = 0;
  for (let y = 1; y < h - 1; y++) {
    for (let x = 1; x < w - 1; x++) {
      const i = y * w + x;
      const m = mag[i] as number;
      if (m <= low) continue;
      const ax = Math.abs(gx[i] as number);
      const ay = Math.abs(gy[i] as number);
      let n1: number, n2: number;
      if (ay <= ax * TAN22) {
        n1 = i - 1;
        n2 = i + 1;
      } else if (ay >= ax * TAN67) {
        n1 = i - w;
        n2 = i + w;
      } else {
        const sameSign = ((gx[i] as number) >= 0) === ((gy[i] as number) >= 0);
        n1 = sameSign ? i - w - 1 : i - w + 1;
        n2 = sameSign ? i + w + 1 : i + w - 1;
      }
      // OpenCV's asymmetric comparison (> one side, >= the other) keeps plateaus one pixel wide.
      if (m > (mag[n1] as number) && m >= (mag[n2] as number)) {
        if (m > high) {
          mark[i] = 2;
          stack[top++] = i;
        } else {
          mark[i] = 1;
        }
      }
    }
  }
  // Hysteresis: weak candidates connected (8-neighbourhood) to a strong edge become edges.
  // Candidates sit inside the 1-pixel border, so every neighbour index is in range.
  while (top > 0) {
    const i = stack[--top] as number;
    for (let dy = -w; dy <= w; dy += w) {
      for (let dx = -1; dx <= 1; dx++) {
        const j = i + dy + dx;
        if (mark[j] === 1) {
          mark[j] = 2;
          stack[top++] = j;
        }
      }
    }
  }
  return mark;
}

/**
 * CLIP image preprocessing shared by the safety checker and the IP-Adapter image encoder: RGB24 →
 * [1,3,224,224] with CLIP's per-channel mean/std (openai/CLIP, diffusers feature_extractor).
 */
import type { Frame } from './Frame.ts';
import { resizeFrame } from './FrameResize.ts';

export const CLIP_SIZE = 224;
const MEAN = [0.48145466, 0.4578275, 0.40821073] as const;
const STD = [0.26862954, 0.26130258, 0.27577711] as const;

/** Writes the CLIP tensor of `frame` into `out` (length 3·224·224); returns `out`. */
export function clipPixels(frame: Frame, out: Float32Array = new Float32Array(3 * CLIP_SIZE * CLIP_SIZE)): Float32Array {
  const f = resizeFrame(frame, CLIP_SIZE, CLIP_SIZE);
  const n = CLIP_SIZE * CLIP_SIZE;
  const d = f.data;
  for (let c = 0; c < 3; c++) {
    const m = MEAN[c] as number;
    const s = STD[c] as number;
    for (let i = 0; i < n; i++) out[c * n + i] = ((d[i * 3 + c] as number) / 255 - m) / s;
  }
  return out;
}

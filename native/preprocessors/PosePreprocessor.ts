/**
 * `pose_tensorrt`: OpenPose body (COCO-18 keypoints). The frame is scaled to detect_resolution²,
 * fed as x/256 − 0.5, and each keypoint's heatmap peak above `threshold` is placed on a black
 * canvas of the frame's size, drawn as the standard OpenPose skeleton (controlnet_aux
 * `draw_bodypose`: its 17 limb colours at 60 % over black, 4 px wide, and 4 px keypoint dots).
 *
 * Limitation, stated in docs/models.md: one person — the strongest peak per keypoint. The part
 * affinity fields that group several people's keypoints are read (contract) but not used yet.
 */
import type { Frame } from '../Frame.ts';
import { ModelPreprocessor, toNchw } from './ModelPreprocessor.ts';
import type { PreprocessorModel } from './PreprocessorModel.ts';

/** controlnet_aux limbSeq (1-based COCO-18 keypoint pairs); the first 17 are drawn. */
export const LIMBS: readonly (readonly [number, number])[] = [
  [2, 3], [2, 6], [3, 4], [4, 5], [6, 7], [7, 8], [2, 9], [9, 10], [10, 11], [2, 12], [12, 13], [13, 14], [2, 1], [1, 15], [15, 17], [1, 16], [16, 18],
];
/** controlnet_aux colours, one per limb / keypoint. */
export const COLOURS: readonly (readonly [number, number, number])[] = [
  [255, 0, 0], [255, 85, 0], [255, 170, 0], [255, 255, 0], [170, 255, 0], [85, 255, 0], [0, 255, 0], [0, 255, 85], [0, 255, 170],
  [0, 255, 255], [0, 170, 255], [0, 85, 255], [0, 0, 255], [85, 0, 255], [170, 0, 255], [255, 0, 255], [255, 0, 170], [255, 0, 85],
];
const STICK = 4;
const DOT = 4;

/** A keypoint in frame pixels, or null when not found. */
export type Keypoint = { x: number; y: number; score: number } | null;

export class PosePreprocessor extends ModelPreprocessor<'pose_tensorrt'> {
  /** Keypoints of the last frame (COCO-18 order), for tests and status. */
  lastKeypoints: Keypoint[] = [];

  constructor(model: PreprocessorModel, params: unknown) {
    super('pose_tensorrt', model, params);
  }

  async apply(frame: Frame): Promise<Frame> {
    const side = this.params.detect_resolution;
    const out = await this.model.run(
      toNchw(frame, side, (v) => v / 256 - 0.5),
      [1, 3, side, side],
    );
    const heat = out['heatmap'];
    if (!heat) throw new Error('heatmap missing');
    const [, channels = 19, gh = 1, gw = 1] = heat.dims as number[];
    const d = heat.data as Float32Array;
    const kps: Keypoint[] = [];
    for (let k = 0; k < Math.min(18, channels - 1); k++) {
      let best = -Infinity;
      let at = 0;
      const base = k * gh * gw;
      for (let i = 0; i < gh * gw; i++) {
        const v = d[base + i] as number;
        if (v > best) {
          best = v;
          at = i;
        }
      }
      kps.push(best > this.params.threshold ? { x: (((at % gw) + 0.5) * frame.width) / gw, y: ((Math.floor(at / gw) + 0.5) * frame.height) / gh, score: best } : null);
    }
    this.lastKeypoints = kps;
    return drawBodyPose(kps, frame.width, frame.height, frame.ptsMs);
  }
}

/** The OpenPose skeleton of `kps` on black, RGB24. */
export function drawBodyPose(kps: readonly Keypoint[], width: number, height: number, ptsMs: number): Frame {
  const data = new Uint8Array(width * height * 3);
  const put = (x: number, y: number, c: readonly number[], alpha: number) => {
    if (x < 0 || y < 0 || x >= width || y >= height) return;
    const j = (y * width + x) * 3;
    for (let ch = 0; ch < 3; ch++) data[j + ch] = Math.round((data[j + ch] as number) * (1 - alpha) + (c[ch] as number) * alpha);
  };
  LIMBS.forEach(([a, b], i) => {
    const p = kps[a - 1];
    const q = kps[b - 1];
    if (!p || !q) return;
    const len = Math.hypot(q.x - p.x, q.y - p.y);
    const steps = Math.max(1, Math.ceil(len));
    const seen = new Set<number>();
    for (let s = 0; s <= steps; s++) {
      const cx = p.x + ((q.x - p.x) * s) / steps;
      const cy = p.y + ((q.y - p.y) * s) / steps;
      for (let dy = -STICK / 2; dy <= STICK / 2; dy++) {
        for (let dx = -STICK / 2; dx <= STICK / 2; dx++) {
          const x = Math.round(cx + dx);
          const y = Math.round(cy + dy);
          const key = y * width + x;
          if (seen.has(key)) continue;
          seen.add(key);
          put(x, y, COLOURS[i] as readonly number[], 0.6);
        }
      }
    }
  });
  kps.forEach((p, i) => {
    if (!p) return;
    for (let dy = -DOT; dy <= DOT; dy++) for (let dx = -DOT; dx <= DOT; dx++) if (dx * dx + dy * dy <= DOT * DOT) put(Math.round(p.x + dx), Math.round(p.y + dy), COLOURS[i] as readonly number[], 1);
  });
  return { width, height, data, ptsMs };
}

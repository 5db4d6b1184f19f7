/**
 * A model-backed ControlNet preprocessor: the input frame → a control image (RGB24, the frame's
 * size) through an ONNX model (PreprocessorModel) with its own pre/post-processing. Runs in the
 * pipeline's worker thread; its per-frame cost shows in `stageMs.control`. `preprocessor_params`
 * are validated per preprocessor (zod, strict: a misspelt key is refused) and are hot: `setParams`
 * applies them from the next frame.
 */
import { z } from 'zod';
import { InvalidProcessorParamsError } from '../errors.ts';
import type { Frame } from '../Frame.ts';
import { resizeFrame } from '../FrameResize.ts';
import type { ModelPreprocessorName, PreprocessorModel, PreprocessorModelInfo } from './PreprocessorModel.ts';

const detect = (multiple: number, min: number, max: number, dflt: number) =>
  z
    .number()
    .int()
    .min(min)
    .max(max)
    .refine((v) => v % multiple === 0, `must be a multiple of ${multiple}`)
    .default(dflt)
    .describe(`Side of the square the model sees, px (multiple of ${multiple}, ${min}–${max}). Default ${dflt}`);

/** Per-preprocessor params (defaults as controlnet_aux / ai-runner use them). */
export const PREPROCESSOR_PARAMS = {
  depth_tensorrt: z.object({ detect_resolution: detect(14, 140, 1022, 518) }).strict(),
  pose_tensorrt: z
    .object({
      detect_resolution: detect(8, 128, 1024, 368),
      threshold: z.number().min(0).max(1).default(0.1).describe('Heatmap peak a keypoint needs to be drawn (0–1). Default 0.1'),
    })
    .strict(),
  soft_edge: z
    .object({
      detect_resolution: detect(8, 128, 1024, 512),
      safe: z.boolean().default(false).describe('Quantise edges to 3 levels (controlnet_aux "safe" HED). Default false'),
    })
    .strict(),
} as const;

export type PreprocessorParams<N extends ModelPreprocessorName> = z.infer<(typeof PREPROCESSOR_PARAMS)[N]>;

/** Validates `raw` for `name`; throws InvalidProcessorParamsError naming the param. */
export function parsePreprocessorParams<N extends ModelPreprocessorName>(name: N, raw: unknown): PreprocessorParams<N> {
  const r = PREPROCESSOR_PARAMS[name].safeParse(raw ?? {});
  if (!r.success) {
    const issue = r.error.issues[0];
    const path = issue?.path.join('.') || (issue?.code === 'unrecognized_keys' ? (issue as { keys?: string[] }).keys?.join(',') : '') || 'params';
    throw new InvalidProcessorParamsError(name, `${path}: ${issue?.message ?? 'invalid'}`);
  }
  return r.data as PreprocessorParams<N>;
}

export abstract class ModelPreprocessor<N extends ModelPreprocessorName = ModelPreprocessorName> {
  readonly name: N;
  protected params: PreprocessorParams<N>;
  protected readonly model: PreprocessorModel;

  constructor(name: N, model: PreprocessorModel, params: unknown) {
    this.name = name;
    this.model = model;
    this.params = parsePreprocessorParams(name, params);
  }

  get info(): PreprocessorModelInfo {
    return this.model.info;
  }

  /** Hot: the next frame uses these params. */
  setParams(raw: unknown): void {
    this.params = parsePreprocessorParams(this.name, raw);
  }

  /** The control image for `frame`, at the frame's size. */
  abstract apply(frame: Frame): Promise<Frame>;

  close(): Promise<void> {
    return this.model.close();
  }
}

/** The frame as NCHW float32 at side × side, each channel mapped by `map(byte, channel)`. */
export function toNchw(frame: Frame, side: number, map: (v: number, c: number) => number): Float32Array {
  const f = resizeFrame(frame, side, side);
  const n = side * side;
  const out = new Float32Array(3 * n);
  const lut = [0, 1, 2].map((c) => Float32Array.from({ length: 256 }, (_, v) => map(v, c)));
  const [l0, l1, l2] = lut as [Float32Array, Float32Array, Float32Array];
  const d = f.data;
  for (let i = 0, j = 0; i < n; i++, j += 3) {
    out[i] = l0[d[j] as number] as number;
    out[n + i] = l1[d[j + 1] as number] as number;
    out[2 * n + i] = l2[d[j + 2] as number] as number;
  }
  return out;
}

/** A single-channel map [0,1] of `w × h` as a grey RGB frame, resized to `width × height`. */
export function greyFrame(map: Float32Array, w: number, h: number, width: number, height: number, ptsMs: number): Frame {
  const rgb = new Uint8Array(w * h * 3);
  for (let i = 0, j = 0; i < w * h; i++, j += 3) {
    const v = Math.max(0, Math.min(255, Math.round((map[i] as number) * 255)));
    rgb[j] = rgb[j + 1] = rgb[j + 2] = v;
  }
  return resizeFrame({ width: w, height: h, data: rgb, ptsMs }, width, height);
}

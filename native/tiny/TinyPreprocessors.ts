/**
 * Tiny demo models for the model-backed ControlNet preprocessors, with exactly the I/O contract of
 * the real exports (native/preprocessors/PreprocessorModel.ts, PREPROCESSOR_CONTRACTS). They are
 * NOT the real networks: a blurred luminance for depth, a Sobel magnitude for soft edges, pooled
 * colours through random 1×1 convolutions for the pose heatmaps/PAFs. Each folder's config.json
 * says `"_demo": true`, so status, logs and /metrics label them demo. A folder holding a real
 * export is never overwritten.
 */
import { isRealExport } from './TinyModelBuilder.ts';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { OnnxGraph } from '../OnnxGraph.ts';
import { MODEL_PREPROCESSOR_NAMES, preprocessorDir, type ModelPreprocessorName } from '../preprocessors/PreprocessorModel.ts';
import { SeededRandom } from '../SeededNoise.ts';

const NOTE = 'DEMO preprocessor: the real I/O contract with a stand-in graph; not the real network';

/** Writes the demo model of each of `names` (default all) under `<modelsDir>/preprocessors/`; returns the folders written. */
export function buildTinyPreprocessors(modelsDir: string, names: readonly ModelPreprocessorName[] = MODEL_PREPROCESSOR_NAMES, seed = 4321): string[] {
  const written: string[] = [];
  for (const name of names) {
    const dir = preprocessorDir(modelsDir, name);
    if (isRealExport(dir)) continue;
    mkdirSync(dir, { recursive: true });
    const rng = new SeededRandom(seed + name.length * 101);
    const graph = name === 'depth_tensorrt' ? depth() : name === 'soft_edge' ? softEdge() : pose(rng);
    writeFileSync(join(dir, 'model.onnx'), graph);
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ _demo: true, _note: NOTE, preprocessor: name }, null, 2));
    written.push(dir);
  }
  return written;
}


/** pixel_values [B,3,H,W] (ImageNet-normalised) → predicted_depth [B,H,W]: blurred luminance ("brighter is nearer"). */
function depth(): Uint8Array {
  const g = new OnnxGraph('depth_anything_v2_small_demo');
  const x = g.input('pixel_values', 'float32', ['batch', 3, 'height', 'width']);
  // Undo the ImageNet normalisation inside the luma weights: y = Σ w_c·(x_c·std_c + mean_c).
  const std = [0.229, 0.224, 0.225];
  const mean = [0.485, 0.456, 0.406];
  const w = [0.299, 0.587, 0.114];
  const luma = g.op1('Conv', [x, g.f32('w_luma', [1, 3, 1, 1], w.map((v, c) => v * (std[c] as number))), g.f32('b_luma', [1], [w.reduce((s, v, c) => s + v * (mean[c] as number), 0)])]);
  const blur = g.op1('AveragePool', [luma], { kernel_shape: [7, 7], strides: [1, 1], pads: [3, 3, 3, 3], count_include_pad: 0 });
  g.op1('ReduceMean', [blur], { axes: [1], keepdims: 0 }, 'predicted_depth');
  g.output('predicted_depth', 'float32', ['batch', 'height', 'width']);
  return g.encode({ demo: 'true' });
}

/** image [B,3,H,W] in [0,255] → edges [B,1,H,W] in [0,1): tanh of the Sobel gradient magnitude of the grey image. */
function softEdge(): Uint8Array {
  const g = new OnnxGraph('hed_demo');
  const x = g.input('image', 'float32', ['batch', 3, 'height', 'width']);
  const grey = g.op1('Conv', [x, g.f32('w_grey', [1, 3, 1, 1], [0.299 / 255, 0.587 / 255, 0.114 / 255])]);
  const sobel = [-1, 0, 1, -2, 0, 2, -1, 0, 1, -1, -2, -1, 0, 0, 0, 1, 2, 1];
  const grad = g.op1('Conv', [grey, g.f32('w_sobel', [2, 1, 3, 3], sobel)], { pads: [1, 1, 1, 1], kernel_shape: [3, 3] });
  const mag = g.op1('ReduceSum', [g.op1('Abs', [grad]), g.i64('axis1', [1], [1])], { keepdims: 1 });
  g.op1('Tanh', [g.op1('Mul', [mag, g.f32('gain', [], [2])])], {}, 'edges');
  g.output('edges', 'float32', ['batch', 1, 'height', 'width']);
  return g.encode({ demo: 'true' });
}

/** image [B,3,H,W] (x/256 − 0.5) → paf [B,38,H/8,W/8], heatmap [B,19,H/8,W/8] (sigmoid): pooled colours through random 1×1 convs. */
function pose(rng: SeededRandom): Uint8Array {
  const g = new OnnxGraph('openpose_body_demo');
  const x = g.input('image', 'float32', ['batch', 3, 'height', 'width']);
  const pooled = g.op1('AveragePool', [x], { kernel_shape: [8, 8], strides: [8, 8] });
  const randn = (n: number, s: number) => Float32Array.from({ length: n }, () => (rng.next() * 2 - 1) * s);
  g.op1('Sigmoid', [g.op1('Conv', [pooled, g.f32('w_heat', [19, 3, 1, 1], randn(57, 6)), g.f32('b_heat', [19], randn(19, 1))])], {}, 'heatmap');
  g.op1('Tanh', [g.op1('Conv', [pooled, g.f32('w_paf', [38, 3, 1, 1], randn(114, 3))])], {}, 'paf');
  g.output('paf', 'float32', ['batch', 38, 'grid_height', 'grid_width']);
  g.output('heatmap', 'float32', ['batch', 19, 'grid_height', 'grid_width']);
  return g.encode({ demo: 'true' });
}

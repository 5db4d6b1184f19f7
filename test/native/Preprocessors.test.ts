/**
 * Model-backed ControlNet preprocessors (depth_tensorrt, pose_tensorrt, soft_edge): the demo
 * models keep the documented export contract; a real GStreamer-decoded frame goes through
 * preprocessor → ControlNet → UNet; preprocessor_params are validated per preprocessor and hot;
 * status tells demo and provider truthfully (TensorRT is not in this onnxruntime-node build).
 */
import { planChange } from '../../native/params/index.ts';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import pino from 'pino';
import t from 'tap';
import {
  buildTinyModel,
  buildTinyPreprocessors,
  createFramePipeline,
  demoModelOptions,
  MODEL_PREPROCESSOR_NAMES,
  openModelPreprocessor,
  parsePreprocessorParams,
  PREPROCESSOR_CONTRACTS,
  type Frame,
  type FramePipeline,
  type ModelPreprocessorName,
  type ParamsPatch,
} from '../../native/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'reverie-pre-'));
const MODEL = 'stabilityai/sd-turbo';
buildTinyModel(dir, MODEL, demoModelOptions(MODEL));
buildTinyPreprocessors(dir);
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const logger = pino({ level: 'silent' });
const W = 128;

/** One frame of GStreamer's test pattern, H.264-encoded and decoded by GStreamer, as RGB24. */
function gstFrame(): Frame {
  const out = join(dir, 'frame.rgb');
  execFileSync('gst-launch-1.0', [
    '-q',
    ...['videotestsrc', 'num-buffers=1', 'pattern=smpte', '!', `video/x-raw,width=${W},height=${W},format=I420`],
    ...['!', 'x264enc', '!', 'h264parse', '!', 'avdec_h264', '!', 'videoconvert', '!', 'video/x-raw,format=RGB', '!', 'filesink', `location=${out}`],
  ]);
  const data = new Uint8Array(readFileSync(out));
  return { width: W, height: W, data, ptsMs: 0 };
}
const input = gstFrame();

const CN: Record<ModelPreprocessorName, string> = {
  depth_tensorrt: 'thibaud/controlnet-sd21-depth-diffusers',
  pose_tensorrt: 'thibaud/controlnet-sd21-openpose-diffusers',
  soft_edge: 'thibaud/controlnet-sd21-hed-diffusers',
};
const base: ParamsPatch = { model_id: MODEL, width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [20] };
async function open(t: { teardown(fn: () => unknown): void }, params: ParamsPatch): Promise<FramePipeline> {
  const p = await createFramePipeline({ modelsDir: dir, params: { ...base, ...params }, logger });
  t.teardown(() => p.close());
  return p;
}
const meanAbsDiff = (a: Uint8Array, b: Uint8Array) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += Math.abs(a[i]! - b[i]!);
  return s / a.length;
};

void t.test('GStreamer decoded a real frame', async (t) => {
  t.equal(input.data.length, W * W * 3);
  t.ok(new Set(input.data).size > 8, 'a picture, not a flat fill');
});

void t.test('demo preprocessor models have exactly the documented export I/O', { timeout: 60_000 }, async (t) => {
  for (const name of MODEL_PREPROCESSOR_NAMES) {
    const c = PREPROCESSOR_CONTRACTS[name];
    const s = await ort.InferenceSession.create(join(dir, 'preprocessors', c.folder, 'model.onnx'));
    t.same(s.inputNames, [c.input], `${name}: input ${c.input}`);
    t.same([...s.outputNames].sort(), Object.keys(c.outputs).sort(), `${name}: outputs ${Object.keys(c.outputs).join(', ')}`);
    const side = c.multiple * 10;
    const out = await s.run({ [c.input]: new ort.Tensor('float32', new Float32Array(3 * side * side).fill(0.2), [1, 3, side, side]) });
    const dims = Object.fromEntries(Object.entries(out).map(([k, v]) => [k, [...v.dims]]));
    const want =
      name === 'depth_tensorrt'
        ? { predicted_depth: [1, side, side] }
        : name === 'pose_tensorrt'
          ? { paf: [1, 38, side / 8, side / 8], heatmap: [1, 19, side / 8, side / 8] }
          : { edges: [1, 1, side, side] };
    t.same(dims, want, `${name}: output shapes at ${side}²`);
    await s.release();
  }
});

void t.test('each preprocessor turns the frame into a control image of the frame size; pose draws the OpenPose skeleton', { timeout: 60_000 }, async (t) => {
  for (const name of MODEL_PREPROCESSOR_NAMES) {
    const pre = await openModelPreprocessor(dir, name, {});
    t.teardown(() => pre.close());
    const img = await pre.apply(input);
    t.equal(img.width, W);
    t.equal(img.height, W);
    t.ok(new Set(img.data).size > 1, `${name}: not blank`);
    if (name !== 'pose_tensorrt') {
      let grey = true;
      for (let i = 0; i < img.data.length; i += 3) if (img.data[i] !== img.data[i + 1] || img.data[i] !== img.data[i + 2]) grey = false;
      t.ok(grey, `${name}: a grey map, as the ControlNet was trained on`);
    } else {
      const kps = (pre as unknown as { lastKeypoints: unknown[] }).lastKeypoints;
      t.equal(kps.length, 18, 'COCO-18 keypoints');
      t.ok(kps.some((k) => k !== null), 'some keypoints found on the demo heatmaps');
      t.ok([...img.data].some((v, i) => i % 3 === 0 && v === 255), 'drawn in the OpenPose colours');
    }
  }
});

void t.test('a GStreamer-decoded frame goes through preprocessor → ControlNet → UNet, and the preprocessor costs show in stageMs.control', { timeout: 120_000 }, async (t) => {
  const none = await (await open(t, {})).process(input);
  for (const name of MODEL_PREPROCESSOR_NAMES) {
    const p = await open(t, { controlnets: [{ model_id: CN[name], conditioning_scale: 1, preprocessor: name }] });
    const out = await p.process(input);
    const s = p.status();
    t.equal(s.buildError, null);
    t.ok(out && none && meanAbsDiff(out.data, none.data) > 0.05, `${name}: the ControlNet conditioned on it changes the output`);
    t.ok(s.stageMs.control > 0, `${name}: stageMs.control ${s.stageMs.control.toFixed(2)} ms`);
  }
});

void t.test('preprocessor_params are validated per preprocessor, and changes are hot and visible on the next frame', { timeout: 120_000 }, async (t) => {
  t.throws(() => parsePreprocessorParams('depth_tensorrt', { detect_resolution: 500 }), /multiple of 14/);
  t.throws(() => parsePreprocessorParams('soft_edge', { safe: 'yes' }), { code: 'INVALID_PROCESSOR_PARAMS' });
  t.throws(() => parsePreprocessorParams('pose_tensorrt', { treshold: 0.2 }), /treshold/, 'a misspelt key is refused by name');
  t.same(parsePreprocessorParams('pose_tensorrt', {}), { detect_resolution: 368, threshold: 0.1 }, 'defaults');
  await t.rejects(open(t, { controlnets: [{ model_id: CN.soft_edge, conditioning_scale: 1, preprocessor: 'soft_edge', preprocessor_params: { detect_resolution: 7 } }] }), { code: 'INVALID_PROCESSOR_PARAMS' });

  const changes: Record<ModelPreprocessorName, [Record<string, unknown>, Record<string, unknown>]> = {
    depth_tensorrt: [{ detect_resolution: 518 }, { detect_resolution: 140 }],
    pose_tensorrt: [{ threshold: 0.1 }, { threshold: 1 }],
    soft_edge: [{ safe: false, detect_resolution: 512 }, { safe: true, detect_resolution: 128 }],
  };
  for (const name of MODEL_PREPROCESSOR_NAMES) {
    const [from, to] = changes[name];
    const cn = (pp: Record<string, unknown>) => [{ model_id: CN[name], conditioning_scale: 1, preprocessor: name, preprocessor_params: pp }];
    const p = await open(t, { controlnets: cn(from) });
    const before = await p.process(input);
    t.same(p.update(planChange(p.params, { controlnets: cn(to) })), { mode: 'hot', hot: ['controlnets'], reload: [] }, `${name}: a preprocessor_params change is hot`);
    const after = await p.process(input);
    t.ok(before && after && meanAbsDiff(before.data, after.data) > 0.01, `${name}: visible on the next frame (mean |Δ| ${before && after ? meanAbsDiff(before.data, after.data).toFixed(3) : 'n/a'})`);
    t.equal(p.status().restartCount, 0, `${name}: no reload`);
    t.same(p.update(planChange(p.params, { controlnets: [{ ...cn(to)[0]!, preprocessor: 'canny' }] })).reload, ['controlnets'], `${name}: another preprocessor reloads`);
  }
});

void t.test('status says which preprocessor models are demos and what they run on', { timeout: 60_000 }, async (t) => {
  const p = await open(t, {
    controlnets: MODEL_PREPROCESSOR_NAMES.map((name) => ({ model_id: CN[name], conditioning_scale: 1, preprocessor: name })),
  });
  const pre = p.status().preprocessors;
  t.same(pre.map((x) => x.preprocessor).sort(), [...MODEL_PREPROCESSOR_NAMES].sort());
  for (const x of pre) {
    t.equal(x.demo, true, `${x.preprocessor}: demo`);
    t.same(x.providers, ['cpu'], `${x.preprocessor}: on cpu here`);
    if (x.preprocessor.endsWith('_tensorrt')) t.match(x.providerNote, /asked for tensorrt; running on cpu/, `${x.preprocessor}: the TensorRT fallback is stated`);
  }
});

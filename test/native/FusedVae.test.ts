import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as ort from 'onnxruntime-node';
import t from 'tap';
import { FUSED_IO, fuseVaeDecoder, fuseVaeEncoder, outputNames, readModel } from '../../native/FusedVae.ts';
import { onnx, OnnxGraph } from '../../native/OnnxGraph.ts';

// Small stand-ins with the real VAE I/O names: the encoder is a 2×2 average pool plus a 1×1
// conv (3 → 2C channels, mean‖logvar like diffusers' `latent_parameters` export), the decoder a
// 1×1 conv (C → 3) plus 2× nearest upsampling. Their float reference is computed here in JS.
const H = 8;
const W = 6;
const C = 2;
const encW = Array.from({ length: 2 * C * 3 }, (_, i) => ((i * 37) % 11) / 10 - 0.5);
const decW = Array.from({ length: 3 * C }, (_, i) => ((i * 29) % 13) / 6 - 1);

function encoderModel(output: 'latent_parameters' | 'latent_sample'): Uint8Array {
  const g = new OnnxGraph('vae_encoder');
  g.input('sample', 'float32', ['batch', 3, 'height', 'width']);
  const pooled = g.op1('AveragePool', ['sample'], { kernel_shape: [2, 2], strides: [2, 2] });
  const ch = output === 'latent_parameters' ? 2 * C : C;
  g.op1('Conv', [pooled, g.f32('w', [ch, 3, 1, 1], encW.slice(0, ch * 3))], {}, output);
  g.output(output, 'float32', ['batch', ch, 'h', 'w']);
  return g.encode();
}

function decoderModel(): Uint8Array {
  const g = new OnnxGraph('vae_decoder');
  g.input('latent_sample', 'float32', ['batch', C, 'h', 'w']);
  const conv = g.op1('Conv', ['latent_sample', g.f32('w', [3, C, 1, 1], decW)]);
  g.op1('Resize', [conv, '', g.f32('scales', [4], [1, 1, 2, 2])], { mode: 'nearest' }, 'sample');
  g.output('sample', 'float32', ['batch', 3, 'height', 'width']);
  return g.encode();
}

/** Reference encoder: RGB24 → [-1,1] NCHW → pool → conv (first C channels) → × sf. */
function refEncode(rgb: Uint8Array, sf: number): Float32Array {
  const h = H / 2;
  const w = W / 2;
  const out = new Float32Array(C * h * w);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const px = [0, 0, 0];
      for (let dy = 0; dy < 2; dy++)
        for (let dx = 0; dx < 2; dx++)
          for (let c = 0; c < 3; c++) px[c] = (px[c] as number) + ((rgb[((2 * y + dy) * W + 2 * x + dx) * 3 + c] as number) / 127.5 - 1) / 4;
      for (let o = 0; o < C; o++) {
        let v = 0;
        for (let c = 0; c < 3; c++) v += (encW[o * 3 + c] as number) * (px[c] as number);
        out[(o * h + y) * w + x] = v * sf;
      }
    }
  return out;
}

/** Reference decoder: latent ÷ sf → conv → upsample → (x+1)·127.5 clamped, truncated → RGB24. */
function refDecode(latent: Float32Array, sf: number): Uint8Array {
  const h = H / 2;
  const w = W / 2;
  const out = new Uint8Array(H * W * 3);
  for (let Y = 0; Y < H; Y++)
    for (let X = 0; X < W; X++)
      for (let c = 0; c < 3; c++) {
        let v = 0;
        for (let i = 0; i < C; i++) v += (decW[c * C + i] as number) * ((latent[(i * h + (Y >> 1)) * w + (X >> 1)] as number) / sf);
        out[(Y * W + X) * 3 + c] = Math.min(255, Math.max(0, v * 127.5 + 128));
      }
  return out;
}

const rgb = Uint8Array.from({ length: H * W * 3 }, (_, i) => (i * 53 + 7) % 256);

t.test('the fused encoder takes RGB24 and returns the scaled mean latent of a latent_parameters export', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fused-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'enc.onnx'), encoderModel('latent_parameters'));
  const model = readModel(join(dir, 'enc.onnx'));
  t.same(outputNames(model), ['latent_parameters']);
  const s = await ort.InferenceSession.create(fuseVaeEncoder(model, { scalingFactor: 0.18215, latentOut: 'latent_parameters' }));
  t.teardown(() => s.release());
  t.same(s.inputNames, [FUSED_IO.rgb]);
  t.same(s.outputNames, [FUSED_IO.latent]);
  const out = await s.run({ [FUSED_IO.rgb]: new ort.Tensor('uint8', rgb, [1, H, W, 3]) });
  const latent = out[FUSED_IO.latent] as ort.Tensor;
  t.same(latent.dims, [1, C, H / 2, W / 2], 'only the mean half of the channels');
  const ref = refEncode(rgb, 0.18215);
  const got = latent.data as Float32Array;
  let maxErr = 0;
  for (let i = 0; i < ref.length; i++) maxErr = Math.max(maxErr, Math.abs((got[i] as number) - (ref[i] as number)));
  t.ok(maxErr < 1e-5, `matches the float reference (max error ${maxErr})`);
});

t.test('the fused decoder returns RGB24 equal to the clamped, truncated float reference', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fused-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'dec.onnx'), decoderModel());
  const s = await ort.InferenceSession.create(fuseVaeDecoder(readModel(join(dir, 'dec.onnx')), { scalingFactor: 0.5 }));
  t.teardown(() => s.release());
  // Values that push the output past both ends of [0,255].
  const latent = Float32Array.from({ length: C * (H / 2) * (W / 2) }, (_, i) => Math.sin(i * 1.7) * 1.5);
  const out = Uint8Array.from({ length: H * W * 3 });
  await s.run({ [FUSED_IO.latent]: new ort.Tensor('float32', latent, [1, C, H / 2, W / 2]) }, { [FUSED_IO.rgb]: new ort.Tensor('uint8', out, [1, H, W, 3]) });
  const ref = refDecode(latent, 0.5);
  let off = 0;
  for (let i = 0; i < ref.length; i++) if (Math.abs((out[i] as number) - (ref[i] as number)) > 1) off++;
  t.equal(off, 0, 'every byte within float rounding (±1) of the reference, written into the caller buffer');
  t.ok(out.includes(0) && out.includes(255), 'the clamp is exercised at both ends');
});

t.test('readModel inlines external weight data so the fused model loads from a buffer', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fused-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const model = onnx.ModelProto.decode(encoderModel('latent_sample'));
  const w = model.graph?.initializer?.find((x) => x.name === 'w');
  if (!w?.rawData) throw new Error('test model has no raw weight');
  const pad = Buffer.alloc(16, 0xee);
  writeFileSync(join(dir, 'weights.bin'), Buffer.concat([pad, Buffer.from(w.rawData)]));
  w.externalData = [
    { key: 'location', value: 'weights.bin' },
    { key: 'offset', value: '16' },
    { key: 'length', value: String(w.rawData.length) },
  ];
  w.dataLocation = 1;
  w.rawData = new Uint8Array(0);
  writeFileSync(join(dir, 'enc.onnx'), onnx.ModelProto.encode(model).finish());
  const s = await ort.InferenceSession.create(fuseVaeEncoder(readModel(join(dir, 'enc.onnx')), { scalingFactor: 1, latentOut: 'latent_sample' }));
  t.teardown(() => s.release());
  const out = await s.run({ [FUSED_IO.rgb]: new ort.Tensor('uint8', rgb, [1, H, W, 3]) });
  const got = (out[FUSED_IO.latent] as ort.Tensor).data as Float32Array;
  const ref = refEncode(rgb, 1);
  t.ok(ref.every((v, i) => Math.abs(v - (got[i] as number)) < 1e-5), 'the weights came from the external file at its offset');
});

import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { buildTinyLora, buildTinyModel, createFramePipeline, readSafetensors, writeSafetensors, type Frame, type StreamParams } from '../../native/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'reverie-lora-'));
const modelDir = buildTinyModel(dir, 'demo/tiny');
buildTinyLora(dir, 'style/tiny');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const logger = pino({ level: 'silent' });
const W = 64;
const input: Frame = { width: W, height: W, data: Uint8Array.from({ length: W * W * 3 }, (_, i) => (Math.sin(i * 0.02) * 90 + 128) | 0), ptsMs: 0 };
const base: Partial<StreamParams> = { model_id: 'demo/tiny', width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [20] };

async function outputOf(t: { teardown(fn: () => unknown): void }, lora: Record<string, number> | null): Promise<Uint8Array> {
  const p = await createFramePipeline({ modelsDir: dir, params: { ...base, lora_dict: lora }, logger });
  t.teardown(() => p.close());
  const f = await p.process(input);
  if (!f) throw new Error('no frame');
  return f.data;
}

void t.test('safetensors round trip keeps names, shapes and values', { timeout: 10_000 }, async (t) => {
  const buf = writeSafetensors({ a: { shape: [2, 3], data: Float32Array.of(1, 2, 3, 4, 5, 6) }, b: { shape: [], data: Float32Array.of(7) } });
  const m = readSafetensors(buf);
  t.same(m.get('a')?.shape, [2, 3]);
  t.same([...(m.get('a')?.data ?? [])], [1, 2, 3, 4, 5, 6]);
  t.same([...(m.get('b')?.data ?? [])], [7]);
});

void t.test('a LoRA with weight 0 gives output identical to no LoRA and writes no merged model', { timeout: 60_000 }, async (t) => {
  const none = await outputOf(t, null);
  const zero = await outputOf(t, { 'style/tiny': 0 });
  t.equal(Buffer.compare(none, zero), 0);
  t.notOk(existsSync(join(modelDir, '.lora-cache')));
});

void t.test('a non-zero weight merges into the UNet (cached once) and changes the output, more with more weight', { timeout: 60_000 }, async (t) => {
  const none = await outputOf(t, null);
  const half = await outputOf(t, { 'style/tiny': 0.5 });
  const again = await outputOf(t, { 'style/tiny': 0.5 });
  const full = await outputOf(t, { 'style/tiny': 1.5 });
  const diff = (a: Uint8Array, b: Uint8Array) => a.reduce((s, v, i) => s + Math.abs(v - (b[i] as number)), 0);
  t.ok(diff(none, half) > 0, 'weight 0.5 changes the output');
  t.ok(diff(none, full) > diff(none, half), 'weight 1.5 changes it more');
  t.equal(Buffer.compare(half, again), 0, 'the cached merge gives the same result');
  t.equal(readdirSync(join(modelDir, '.lora-cache')).length, 2, 'one merged model per (lora, weight) combination');
  const merged = readdirSync(join(modelDir, '.lora-cache')).map((d) => readFileSync(join(modelDir, '.lora-cache', d, 'unet', 'model.onnx')).length);
  t.ok(merged.every((n) => n > 0));
});

void t.test('missing LoRA files and paths escaping the lora folder fail the build clearly (the stream keeps serving the processors alone)', { timeout: 60_000 }, async (t) => {
  for (const [key, why] of [
    ['nope/missing', /not found/],
    ['../../etc/passwd', /escapes/],
  ] as const) {
    const p = await createFramePipeline({ modelsDir: dir, params: { ...base, lora_dict: { [key]: 1 } }, logger });
    t.teardown(() => p.close());
    t.match(p.status().buildError, why, `${key}: the reason is reported`);
    t.match(p.status().buildError, /model load failed/);
    t.equal(p.status().fallback, 'processors');
  }
});

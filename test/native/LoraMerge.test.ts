import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { buildTinyLora, buildTinyModel, createFramePipeline, readSafetensors, writeSafetensors, type Frame, type ParamsPatch } from '../../native/index.ts';
import { LORA_CACHE_MAX_BYTES, LORA_WEIGHT_STEP, mergedUnetFile } from '../../native/LoraMerge.ts';

const dir = mkdtempSync(join(tmpdir(), 'reverie-lora-'));
const modelDir = buildTinyModel(dir, 'demo/tiny');
buildTinyLora(dir, 'style/tiny');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const logger = pino({ level: 'silent' });
const W = 64;
const input: Frame = { width: W, height: W, data: Uint8Array.from({ length: W * W * 3 }, (_, i) => (Math.sin(i * 0.02) * 90 + 128) | 0), ptsMs: 0 };
const base: ParamsPatch = { model_id: 'demo/tiny', width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [20] };

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

void t.test('merges are keyed by weights rounded to 0.01 and the cache keeps the most recently used within its byte budget', { timeout: 60_000 }, async (t) => {
  const own = buildTinyModel(dir, 'demo/tiny-lru');
  const cache = join(own, '.lora-cache');
  const a = mergedUnetFile(dir, own, { 'style/tiny': 0.5 }, logger);
  t.equal(mergedUnetFile(dir, own, { 'style/tiny': 0.501 }, logger), a, '0.501 rounds to 0.5: the same merged file');
  t.equal(LORA_WEIGHT_STEP, 0.01);
  const size = statSync(a).size;
  const budget = Math.floor(size * 2.5); // room for two merges
  const b = mergedUnetFile(dir, own, { 'style/tiny': 0.6 }, logger, budget);
  t.equal(readdirSync(cache).length, 2);
  mergedUnetFile(dir, own, { 'style/tiny': 0.5 }, logger, budget); // a hit: 0.5 becomes the most recent
  const c = mergedUnetFile(dir, own, { 'style/tiny': 0.7 }, logger, budget);
  t.equal(readdirSync(cache).length, 2, 'a third merge evicted one');
  t.ok(existsSync(a), 'the recently used 0.5 merge stayed');
  t.ok(existsSync(c), 'the new one is there');
  t.notOk(existsSync(b), 'the least recently used (0.6) went');
  t.ok(LORA_CACHE_MAX_BYTES >= 4 * 1024 ** 3, `default budget ${LORA_CACHE_MAX_BYTES} bytes`);
});

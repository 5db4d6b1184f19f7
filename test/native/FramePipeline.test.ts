import { paramsWork, planChange } from '../../native/params/index.ts';
import { StreamEngine } from '../../native/StreamEngine.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { buildTinyModel, createFramePipeline, createProcessorChain, type Frame, type FramePipeline, type ParamsPatch } from '../../native/index.ts';

// Tiny demo models on CPU at 128×128 (16×16 latents with the f=8 VAE) keep each frame ~ms.
const dir = mkdtempSync(join(tmpdir(), 'reverie-native-'));
buildTinyModel(dir, 'demo/tiny');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const logger = pino({ level: 'silent' });
const W = 128;

function frame(seed: number, ptsMs = 0): Frame {
  const data = new Uint8Array(W * W * 3);
  for (let i = 0; i < data.length; i++) data[i] = (Math.sin(i * 0.013 + seed) * 100 + 128) | 0;
  return { width: W, height: W, data, ptsMs };
}

const base: ParamsPatch = { model_id: 'demo/tiny', width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [12, 20, 32] };

async function open(t: Tap, params: ParamsPatch = {}): Promise<FramePipeline> {
  const p = await createFramePipeline({ modelsDir: dir, params: { ...base, ...params }, logger });
  t.teardown(() => p.close());
  return p;
}
type Tap = { teardown(fn: () => unknown): void };

async function run(p: FramePipeline, seeds: number[]): Promise<(Frame | null)[]> {
  const out: (Frame | null)[] = [];
  for (const [i, s] of seeds.entries()) out.push(await p.process(frame(s, i)));
  return out;
}

const same = (a: Frame | null, b: Frame | null) => !!a && !!b && Buffer.compare(a.data, b.data) === 0;

void t.test('Stream Batch lag equals len(t_index_list) − 1: output k comes from input k − lag', { timeout: 60_000 }, async (t) => {
  const a = await open(t);
  const b = await open(t);
  t.equal(a.status().lag, 2);
  const ra = await run(a, [7, 1, 1, 1, 1]);
  const rb = await run(b, [1, 1, 1, 1, 1]);
  t.same(ra.slice(0, 2), [null, null], 'first lag frames are null while the batch fills');
  t.ok(ra[2] && rb[2], 'output from frame lag on');
  t.notOk(same(ra[2] ?? null, rb[2] ?? null), 'output 2 carries input 0');
  t.ok(same(ra[3] ?? null, rb[3] ?? null) && same(ra[4] ?? null, rb[4] ?? null), 'later outputs no longer depend on input 0');
  const one = await open(t, { t_index_list: [20] });
  t.equal(one.status().lag, 0);
  t.ok(await one.process(frame(1)), 'a single step has no lag');
});

void t.test('same seed and input give the same output; another seed differs', { timeout: 60_000 }, async (t) => {
  const [a, b, c] = [await open(t, { seed: 42 }), await open(t, { seed: 42 }), await open(t, { seed: 43 })];
  const ra = await run(a, [1, 2, 3, 4]);
  const rb = await run(b, [1, 2, 3, 4]);
  const rc = await run(c, [1, 2, 3, 4]);
  t.ok(same(ra[3] ?? null, rb[3] ?? null));
  t.notOk(same(ra[3] ?? null, rc[3] ?? null));
});

void t.test('a prompt change changes the output from the very next frame, without a reload', { timeout: 60_000 }, async (t) => {
  const a = await open(t, { prompt: 'a photo of a cat' });
  const b = await open(t, { prompt: 'a photo of a cat' });
  await run(a, [1, 2, 3]);
  await run(b, [1, 2, 3]);
  const r = a.update(planChange(a.params, { prompt: 'neon cyberpunk city at night' }));
  t.same(r, { mode: 'hot', hot: ['prompt'], reload: [] });
  const fa = await a.process(frame(4));
  const fb = await b.process(frame(4));
  t.notOk(same(fa, fb), 'changed on the first frame after update()');
  t.equal(a.status().restartCount, 0);
});

void t.test('weighted prompt and seed lists blend and differ from either end', { timeout: 60_000 }, async (t) => {
  const p = await open(t, { t_index_list: [20], prompt: [['a cat', 0.5], ['a dog', 0.5]], seed: [[1, 0.5], [2, 0.5]] });
  const q = await open(t, { t_index_list: [20], prompt: 'a cat', seed: 1 });
  t.notOk(same(await p.process(frame(1)), await q.process(frame(1))));
});

void t.test('skip_diffusion returns the processed input', { timeout: 60_000 }, async (t) => {
  const post = { processors: [{ type: 'upscale', params: { scale_factor: 2 } }] };
  const p = await open(t, { skip_diffusion: true, image_postprocessing: post, model_id: 'not/loaded' });
  const f = frame(3);
  const out = await p.process(f);
  const want = createProcessorChain(post, 'image').apply(f);
  t.ok(same(out, want));
  t.equal(out?.width, 2 * W);
  t.same(p.status().providers, [], 'no model loaded');
});

void t.test('similarity filter skips identical frames (returns null) but never more than max in a row', { timeout: 60_000 }, async (t) => {
  const p = await open(t, { t_index_list: [20], enable_similar_image_filter: true, similar_image_filter_threshold: 0.5, similar_image_filter_max_skip_frame: 2 });
  const r = await run(p, [1, 1, 1, 1, 1, 1, 1]);
  t.same(r.map((x) => x !== null), [true, false, false, true, false, false, true]);
  t.equal(p.status().framesSkipped, 4);
});

void t.test('a reload keeps serving, then swaps between two frames with the new size', { timeout: 60_000 }, async (t) => {
  const p = await open(t);
  await run(p, [1, 2, 3]);
  const r = p.update(planChange(p.params, { width: 64, height: 64 }));
  t.same(r.reload, ['width', 'height']);
  t.equal(p.status().state, 'reloading');
  const during = await p.process(frame(4));
  t.equal(during?.width, W, 'old pipeline still serving');
  await p.whenIdle();
  const after = await p.process(frame(5));
  t.equal(after?.width, 64, 'swapped, primed: no null gap');
  t.equal(p.status().restartCount, 1);
  t.equal(p.status().lastError, null);
});

void t.test('hot params sent while a reload builds reach the new pipeline; several reloads keep serving', { timeout: 90_000 }, async (t) => {
  const p = await open(t);
  await run(p, [1, 2, 3]);
  p.update(planChange(p.params, { width: 64, height: 64 }));
  p.update(planChange(p.params, { prompt: 'neon city at night' }));
  await p.whenIdle();
  // After lag+1 frames of one input, a Stream Batch's output depends only on that input, the
  // params and the seed: the reloaded pipeline must match a fresh one built with the new prompt.
  const last = async (q: FramePipeline) => (await run(q, [9, 9, 9, 9, 9])).at(-1) ?? null;
  const got = await last(p);
  const want = await last(await open(t, { width: 64, height: 64, prompt: 'neon city at night' }));
  const old = await last(await open(t, { width: 64, height: 64 }));
  t.ok(same(got, want), 'the prompt sent during the build is applied');
  t.notOk(same(got, old), 'and it differs from the old prompt');
  // Two more reloads: the retired pipeline's thread is reused as the spare each time.
  for (const size of [96, 128]) {
    p.update(planChange(p.params, { width: size, height: size }));
    await p.whenIdle();
    const out = await p.process(frame(10));
    t.equal(out?.width, size, `serving ${size}x${size} at once after the reload`);
  }
  t.equal(p.status().restartCount, 3);
  t.equal(p.status().lastError, null);
});

void t.test('hot params sent after a reload is built but before the swap reach the new pipeline', { timeout: 90_000 }, async (t) => {
  const p = await open(t);
  await run(p, [1, 2, 3]);
  p.update(planChange(p.params, { width: 64, height: 64 }));
  await p.whenIdle(); // built and primed; the swap waits for the next frame
  p.update(planChange(p.params, { prompt: 'neon city at night' }));
  const last = async (q: FramePipeline) => (await run(q, [9, 9, 9, 9, 9])).at(-1) ?? null;
  const got = await last(p);
  const want = await last(await open(t, { width: 64, height: 64, prompt: 'neon city at night' }));
  t.ok(same(got, want), 'the prompt is applied after the swap');
});

void t.test('a failed reload keeps the old pipeline and records the error', { timeout: 60_000 }, async (t) => {
  const p = await open(t);
  await run(p, [1, 2, 3]);
  p.update(planChange(p.params, { model_id: 'missing/model' }));
  await p.whenIdle();
  const s = p.status();
  t.equal(s.restartCount, 1);
  t.match(s.lastError, /missing\/model/);
  t.ok(s.lastRestartLogs.some((l) => l.includes('failed')));
  t.equal(p.params.model_id, 'missing/model', 'the params stay as asked (the API stored them): the next reload builds them again');
  t.equal(s.modelId, 'demo/tiny', 'while the old pipeline serves');
  t.ok(await p.process(frame(4)), 'still serving');
  t.match(s.buildError, /missing\/model/, 'the build error stays reported while the old pipeline serves');
  t.equal(s.fallback, 'previous');
  p.update(planChange(p.params, { model_id: 'demo/tiny', seed: 5 }));
  await p.whenIdle();
  t.equal(p.status().buildError, null, 'a later update that builds clears it');
});

void t.test('a pipeline that cannot be built at creation serves the image processors alone, reports why, and recovers on a later update', { timeout: 60_000 }, async (t) => {
  const blur = { processors: [{ type: 'blur', params: { radius: 2 } }] };
  const p = await open(t, { model_id: 'missing/model', image_postprocessing: blur });
  let s = p.status();
  t.equal(s.fallback, 'processors');
  t.match(s.buildError, /missing\/model/, 'the reason');
  t.match(s.lastError, /cannot be built/);
  t.same(s.providers, [], 'no model loaded');
  const input = frame(1);
  const out = await p.process(input);
  t.ok(out, 'frames keep coming out (no Stream Batch lag)');
  const blurred = createProcessorChain(blur, 'image').apply(frame(1));
  t.ok(out && Buffer.compare(out.data, blurred.data) === 0, 'the image processors still run on them');
  // The control plane sends the full params on each update; one that can be built swaps in.
  p.update(planChange(p.params, { ...p.params, model_id: 'demo/tiny', skip_diffusion: false }));
  await p.whenIdle();
  await run(p, [2, 3, 4]);
  s = p.status();
  t.equal(s.fallback, 'none');
  t.equal(s.buildError, null, 'recovered');
  t.equal(s.demo, true, 'the diffusion pipeline serves again');
  t.equal(s.modelId, 'demo/tiny');
});

void t.test('invalid params still throw at creation (no fallback hides a client error)', { timeout: 60_000 }, async (t) => {
  await t.rejects(createFramePipeline({ modelsDir: dir, params: { ...base, t_index_list: [30, 10] }, logger }), { code: 'INVALID_PARAMS' });
});

void t.test('tensorrt acceleration without TensorRT falls back to cpu and says so', { timeout: 60_000 }, async (t) => {
  const p = await open(t, { acceleration: 'tensorrt' });
  const s = p.status();
  t.same(s.providers, ['cpu']);
  t.match(s.providerNote, /cpu/);
  t.equal(s.demo, true);
});

void t.test('a node without TensorRT logs the cpu fallback once, one line without a stack, however many streams open', { timeout: 60_000 }, async (t) => {
  const lines: { level: number; msg: string; err?: unknown; stack?: unknown }[] = [];
  const capture = pino({ level: 'debug' }, { write: (l: string) => void lines.push(JSON.parse(l) as (typeof lines)[number]) });
  for (let i = 0; i < 3; i++) {
    const p = await createFramePipeline({ modelsDir: dir, params: { ...base, acceleration: 'tensorrt' }, logger: capture });
    t.teardown(() => p.close());
    t.match(p.status().providerNote, /cpu/, `stream ${i} still says it runs on cpu`);
  }
  const fallbacks = lines.filter((l) => /running on cpu/.test(l.msg));
  t.equal(fallbacks.filter((l) => l.level >= 40).length, 1, 'one warn line for three streams');
  t.equal(fallbacks.filter((l) => l.level < 40).length, 2, 'the repeats go out at debug');
  t.notOk(fallbacks.some((l) => l.err !== undefined || l.stack !== undefined), 'no stack trace');
});

void t.test('bad updates throw synchronously and change nothing', { timeout: 60_000 }, async (t) => {
  const p = await open(t);
  t.throws(() => p.update(planChange(p.params, { t_index_list: [30, 10] })), { code: 'INVALID_PARAMS' });
  t.throws(() => p.update(planChange(p.params, { image_preprocessing: { processors: [{ type: 'depth' }] } })), { code: 'UNSUPPORTED_PROCESSOR' });
  t.same(p.params.t_index_list, [12, 20, 32]);
  await p.close();
  await p.close();
  await t.rejects(p.process(frame(1)), { code: 'INVALID_STATE' });
});

void t.test('num_inference_steps runs up to the 1000 training timesteps; values beyond 1–1000 run clamped', { timeout: 60_000 }, async (t) => {
  const p = await open(t, { num_inference_steps: 200, t_index_list: [10, 40] });
  const out = await run(p, [1, 2, 3]);
  t.ok(out[1] && out[2], 'frames come out at 200 steps');
  const hot = p.update(planChange(p.params, { num_inference_steps: 1000 }));
  t.same(hot.hot, ['num_inference_steps'], 'a hot change');
  t.ok(await p.process(frame(4)), 'and at 1000');
  // The spec bounds steps by ±(2^53 − 1) only: beyond the training timesteps runs as 1000, below 1 as 1.
  t.same(p.update(planChange(p.params, { num_inference_steps: Number.MAX_SAFE_INTEGER })).hot, [], 'above 1000 is the same grid: nothing to change');
  t.equal(p.params.num_inference_steps, 1000, 'the engine runs 1000 steps');
  t.ok(await p.process(frame(5)), 'and frames still come out');
  t.same(p.update(planChange(p.params, { num_inference_steps: -Number.MAX_SAFE_INTEGER, t_index_list: [0, 1] })).hot.sort(), ['num_inference_steps', 't_index_list']);
  t.equal(p.params.num_inference_steps, 1, 'below 1 runs as 1 step');
  t.ok(await p.process(frame(6)), 'frames come out at 1 step');
});

void t.test('a planned change is applied as it is: the pipeline and its engine merge, check and plan nothing again', { timeout: 60_000 }, async (t) => {
  type Work = typeof paramsWork;
  const since = (a: Work): Work => ({ merges: paramsWork.merges - a.merges, checks: paramsWork.checks - a.checks, plans: paramsWork.plans - a.plans });
  // The engine in this thread, so its counts are this thread's.
  const opening = { ...paramsWork };
  const engine = await StreamEngine.open({ modelsDir: dir, params: base, logger });
  t.teardown(() => engine.close());
  const opened = since(opening);
  t.ok(opened.merges >= 1 && opened.checks >= 1, `opening from a patch merges and checks it: the counters count (${JSON.stringify(opened)})`);
  const plain = await engine.process(frame(1));
  const change = planChange(engine.params, { seed: 7, prompt: 'a heron' });
  t.same(change.plan, { mode: 'hot', hot: ['prompt', 'seed'], reload: [] }, 'planned once, by the caller');
  const taking = { ...paramsWork };
  engine.update(change);
  const out = await engine.process(frame(1));
  t.same(since(taking), { merges: 0, checks: 0, plans: 0 }, 'the engine took it and ran a frame with it without merging, checking or planning');
  t.notOk(same(plain, out), 'and the frame shows it');
  t.same(engine.status().paramsWork, { ...paramsWork }, "its status reports its thread's counts");

  const p = await open(t);
  const hosting = { ...paramsWork };
  p.update(planChange(p.params, { width: 192 }));
  const planned = since(hosting);
  const reloading = { ...paramsWork };
  await p.whenIdle();
  await run(p, [1, 2]);
  t.same(since(reloading), { merges: 0, checks: 0, plans: 0 }, 'the pipeline host applied a reload without merging, checking or planning it again');
  t.same(planned, { merges: 1, checks: 1, plans: 1 }, 'only the caller planned it');
  t.equal(p.status().restartCount, 1, 'and the reload ran');
});

import t from 'tap';
import { MAX_FRAME_SIDE } from '../../native/index.ts';
import type { Frame } from '../../native/Frame.ts';
import { UnsupportedProcessorError, InvalidProcessorParamsError } from '../../native/errors.ts';
import {
  createProcessorChain,
  IMAGE_PROCESSOR_TYPES,
  LATENT_PROCESSOR_TYPES,
} from '../../native/processors/ProcessorChain.ts';

function solid(w: number, h: number, rgb: [number, number, number], ptsMs = 0): Frame {
  const data = new Uint8Array(w * h * 3);
  for (let i = 0; i < w * h; i++) data.set(rgb, i * 3);
  return { width: w, height: h, data, ptsMs };
}

/** Left half black, right half white: one vertical edge at x = w/2. */
function step(w: number, h: number): Frame {
  const f = solid(w, h, [0, 0, 0]);
  for (let y = 0; y < h; y++) for (let x = w / 2; x < w; x++) f.data.fill(255, (y * w + x) * 3, (y * w + x) * 3 + 3);
  return f;
}

const px = (f: Frame, x: number, y: number) => f.data[(y * f.width + x) * 3] as number;

void t.test('exports the implemented types for API validation', async (t) => {
  t.same([...IMAGE_PROCESSOR_TYPES].sort(), ['blur', 'canny', 'feedback', 'passthrough', 'sharpen', 'upscale']);
  t.same([...LATENT_PROCESSOR_TYPES], ['latent_feedback']);
});

void t.test('an unknown or wrong-kind type throws UnsupportedProcessorError naming it', async (t) => {
  const err = t.throws(() => createProcessorChain({ processors: [{ type: 'depth' }] }, 'image')) as unknown;
  t.ok(err instanceof UnsupportedProcessorError);
  t.match((err as Error).message, /depth/);
  t.equal((err as UnsupportedProcessorError).processorType, 'depth');
  t.throws(() => createProcessorChain({ processors: [{ type: 'blur' }] }, 'latent'), UnsupportedProcessorError);
  // Disabled entries are still validated.
  t.throws(() => createProcessorChain({ processors: [{ type: 'nope', enabled: false }] }, 'image'), UnsupportedProcessorError);
});

void t.test('bad params throw InvalidProcessorParamsError', async (t) => {
  t.throws(() => createProcessorChain({ processors: [{ type: 'blur', params: { radius: -1 } }] }, 'image'), InvalidProcessorParamsError);
  t.throws(
    () => createProcessorChain({ processors: [{ type: 'canny', params: { low_threshold: 300, high_threshold: 100 } }] }, 'image'),
    InvalidProcessorParamsError,
  );
  t.throws(() => createProcessorChain({ processors: [{ type: 'upscale', params: { scale_factor: 2.5 } }] }, 'image'), InvalidProcessorParamsError);
});

void t.test('empty, undefined and disabled blocks are identity', async (t) => {
  const f = step(8, 8);
  for (const chain of [
    createProcessorChain(undefined, 'image'),
    createProcessorChain({ processors: [] }, 'image'),
    createProcessorChain({ enabled: false, processors: [{ type: 'blur' }] }, 'image'),
    createProcessorChain({ processors: [{ type: 'blur', enabled: false }] }, 'image'),
  ]) {
    t.ok(chain.empty);
    t.equal(chain.apply(f), f);
  }
});

void t.test('blur smooths a step edge and keeps flat areas, never mutating its input', async (t) => {
  const f = step(64, 16);
  const copy = f.data.slice();
  const out = createProcessorChain({ processors: [{ type: 'blur', params: { radius: 4 } }] }, 'image').apply(f);
  t.same(f.data, copy, 'input unchanged');
  t.equal(px(out, 2, 8), 0);
  t.equal(px(out, 61, 8), 255);
  const mid = px(out, 32, 8);
  t.ok(mid > 60 && mid < 200, `edge is smoothed (${mid})`);
  t.equal(out.ptsMs, f.ptsMs);
});

void t.test('sharpen increases contrast across an edge and amount 0 is identity', async (t) => {
  const f = solid(32, 8, [100, 100, 100]);
  for (let y = 0; y < 8; y++) for (let x = 16; x < 32; x++) f.data.fill(150, (y * 32 + x) * 3, (y * 32 + x) * 3 + 3);
  const out = createProcessorChain({ processors: [{ type: 'sharpen', params: { amount: 1 } }] }, 'image').apply(f);
  t.ok(px(out, 15, 4) < 100, 'dark side darker near the edge');
  t.ok(px(out, 16, 4) > 150, 'bright side brighter near the edge');
  t.equal(px(out, 2, 4), 100, 'flat areas unchanged');
  const same = createProcessorChain({ processors: [{ type: 'sharpen', params: { amount: 0 } }] }, 'image').apply(f);
  t.equal(same, f);
});

void t.test('canny marks the step edge white on black and nothing in flat areas', async (t) => {
  const out = createProcessorChain({ processors: [{ type: 'canny' }] }, 'image').apply(step(32, 32));
  let edgeCols = new Set<number>();
  for (let y = 2; y < 30; y++) for (let x = 0; x < 32; x++) if (px(out, x, y) === 255) edgeCols.add(x);
  t.ok(edgeCols.size >= 1 && edgeCols.size <= 2, `thin edge (${[...edgeCols].join(',')})`);
  t.ok([...edgeCols].every((x) => x === 15 || x === 16));
  const flat = createProcessorChain({ processors: [{ type: 'canny' }] }, 'image').apply(solid(16, 16, [80, 90, 100]));
  t.ok(flat.data.every((v) => v === 0));
  edgeCols = new Set();
  // Thresholds above the step's gradient (4·255 = 1020) find nothing.
  const none = createProcessorChain({ processors: [{ type: 'canny', params: { low_threshold: 1100, high_threshold: 1200 } }] }, 'image').apply(step(32, 32));
  t.ok(none.data.every((v) => v === 0));
});

void t.test('feedback blends with the previous output; first frame passes through', async (t) => {
  const chain = createProcessorChain({ processors: [{ type: 'feedback', params: { feedback_strength: 0.25 } }] }, 'image');
  const a = solid(4, 4, [200, 200, 200]);
  t.equal(px(chain.apply(a), 0, 0), 200);
  const b = chain.apply(solid(4, 4, [0, 0, 0]));
  t.equal(px(b, 0, 0), 50, '0.75·0 + 0.25·200');
  chain.observeOutput(solid(4, 4, [100, 100, 100]));
  t.equal(px(chain.apply(solid(4, 4, [0, 0, 0])), 0, 0), 25, 'uses the observed pipeline output');
  chain.reset();
  t.equal(px(chain.apply(solid(4, 4, [0, 0, 0])), 0, 0), 0, 'reset forgets');
});

void t.test('canny reuses its working planes across frames and sizes without carrying edges over', async (t) => {
  // A frame full of edges, then a flat one of the same size (stale marks would show), then other sizes.
  const busy = step(32, 32);
  for (let i = 0; i < busy.data.length; i += 7) busy.data[i] = 255;
  const frames = [busy, solid(32, 32, [80, 90, 100]), step(16, 24), step(32, 32)];
  const reused = createProcessorChain({ processors: [{ type: 'canny' }] }, 'image');
  for (const f of frames) {
    const fresh = createProcessorChain({ processors: [{ type: 'canny' }] }, 'image').apply(f);
    t.same(reused.apply(f).data, fresh.data, `${f.width}x${f.height}: same edges as a fresh detector`);
  }
  const flat = reused.apply(solid(32, 32, [80, 90, 100]));
  t.ok(flat.data.every((v) => v === 0), 'a flat frame after a busy one has no edges');
});

void t.test('upscale changes the output size and interpolates', async (t) => {
  const out = createProcessorChain({ processors: [{ type: 'upscale', params: { scale_factor: 2 } }] }, 'image').apply(step(8, 4));
  t.equal(out.width, 16);
  t.equal(out.height, 8);
  t.equal(out.data.length, 16 * 8 * 3);
  t.equal(px(out, 0, 0), 0);
  t.equal(px(out, 15, 7), 255);
  const mid = px(out, 7, 3);
  t.ok(mid > 0 && mid < 255, 'interpolated at the edge');
});

void t.test('stacked upscalers never make a frame larger than MAX_FRAME_SIDE', async (t) => {
  const chain = createProcessorChain({ processors: Array.from({ length: 16 }, () => ({ type: 'upscale', params: { scale_factor: 4 } })) }, 'image');
  const out = chain.apply(step(512, 384));
  t.equal(MAX_FRAME_SIDE, 2048);
  t.equal(out.width, 2048, '512 × 4 = 2048: the first upscaler fits, the other 15 pass the frame on');
  t.equal(out.height, 1536);
  const odd = createProcessorChain({ processors: [{ type: 'upscale', params: { scale_factor: 4 } }] }, 'image').apply(step(1000, 10));
  t.equal(odd.width, 2000, 'a factor that would overshoot is lowered to the largest that fits (2)');
});

void t.test('processors apply in order', async (t) => {
  const a = createProcessorChain({ processors: [{ type: 'upscale' }, { type: 'canny' }] }, 'image');
  t.same(a.types, ['upscale', 'canny']);
  t.equal(a.apply(step(8, 8)).width, 16);
});

void t.test('latent_feedback blends latents; first passes through', async (t) => {
  const chain = createProcessorChain({ processors: [{ type: 'latent_feedback', params: { feedback_strength: 0.5 } }] }, 'latent');
  const first = chain.apply({ data: new Float32Array([2, 4]), dims: [1, 2, 1, 1] });
  t.same([...first.data], [2, 4]);
  const second = chain.apply({ data: new Float32Array([0, 0]), dims: [1, 2, 1, 1] });
  t.same([...second.data], [1, 2]);
});

void t.test('blur at 512x512 costs a few ms', async (t) => {
  const f = step(512, 512);
  const chain = createProcessorChain({ processors: [{ type: 'blur' }] }, 'image');
  for (let i = 0; i < 3; i++) chain.apply(f);
  const times: number[] = [];
  for (let i = 0; i < 10; i++) {
    const t0 = performance.now();
    chain.apply(f);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  const p50 = times[5] as number;
  t.comment(`blur 512² p50 ${p50.toFixed(2)} ms`);
  // Generous bound for a shared 2-core machine; the bench reports the real number.
  t.ok(p50 < 100, `p50 ${p50.toFixed(2)} ms`);
});

import { planChange } from '../../native/params/index.ts';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import {
  buildTinyModel,
  CONTROLNETS_BY_FAMILY,
  controlNetsFor,
  createFramePipeline,
  type ControlNetPatch,
  type Frame,
  type FramePipeline,
  type ParamsPatch,
} from '../../native/index.ts';

// A demo model under the real sd-turbo id, with two of its family's ControlNets on disk.
const dir = mkdtempSync(join(tmpdir(), 'reverie-cn-'));
const MODEL = 'stabilityai/sd-turbo';
const CANNY = 'thibaud/controlnet-sd21-canny-diffusers';
const DEPTH = 'thibaud/controlnet-sd21-depth-diffusers';
buildTinyModel(dir, MODEL, { controlNets: [CANNY, DEPTH] });
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const logger = pino({ level: 'silent' });
const W = 128;

function frame(seed: number): Frame {
  const data = new Uint8Array(W * W * 3);
  for (let i = 0; i < data.length; i++) data[i] = (Math.sin(i * 0.013 + seed) * 100 + 128) | 0;
  return { width: W, height: W, data, ptsMs: 0 };
}
const base: ParamsPatch = { model_id: MODEL, width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [12, 20, 32] };
const cn = (over: Partial<ControlNetPatch> = {}): ControlNetPatch => ({ model_id: CANNY, conditioning_scale: 0, preprocessor: 'passthrough', ...over });

async function open(t: { teardown(fn: () => unknown): void }, params: ParamsPatch = {}): Promise<FramePipeline> {
  const p = await createFramePipeline({ modelsDir: dir, params: { ...base, ...params }, logger });
  t.teardown(() => p.close());
  return p;
}
async function outputs(p: FramePipeline, n = 5): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for (let i = 0; i < n; i++) {
    const f = await p.process(frame(i));
    if (f) out.push(f.data);
  }
  return out;
}
const maxAbsDiff = (a: Uint8Array[], b: Uint8Array[]) => {
  let m = a.length === b.length ? 0 : Infinity;
  for (let k = 0; k < Math.min(a.length, b.length); k++) for (let i = 0; i < (a[k] as Uint8Array).length; i++) m = Math.max(m, Math.abs((a[k] as Uint8Array)[i]! - (b[k] as Uint8Array)[i]!));
  return m;
};

void t.test('a ControlNet at conditioning_scale 0 gives byte-identical output to no ControlNet', { timeout: 60_000 }, async (t) => {
  const none = await outputs(await open(t));
  const zero = await outputs(await open(t, { controlnets: [cn({ conditioning_scale: 0 })] }));
  t.equal(none.length, 3);
  t.equal(maxAbsDiff(none, zero), 0);
});

void t.test('a non-zero scale changes the output; conditioning_scale is hot (next frame, no reload)', { timeout: 60_000 }, async (t) => {
  const none = await outputs(await open(t));
  const p = await open(t, { controlnets: [cn({ conditioning_scale: 1 })] });
  const on = await outputs(p);
  t.ok(maxAbsDiff(none, on) > 0, 'control changes the picture');
  const r = p.update(planChange(p.params, { controlnets: [cn({ conditioning_scale: 0 })] }));
  t.same(r, { mode: 'hot', hot: ['controlnets'], reload: [] });
  // A twin that keeps scale 1: the very next frame already differs (the Stream Batch slots still
  // carry latents denoised under control, so it is not yet equal to a never-controlled stream).
  const twin = await open(t, { controlnets: [cn({ conditioning_scale: 1 })] });
  await outputs(twin);
  const a = await p.process(frame(9));
  const b = await twin.process(frame(9));
  t.ok(a && b && Buffer.compare(a.data, b.data) !== 0, 'scale change applied on the very next frame');
  t.equal(p.status().restartCount, 0);
});

void t.test('control_guidance_start/end gate by denoising fraction: a window outside every slot is no control', { timeout: 60_000 }, async (t) => {
  // t_index 12,20,32 of 50 → fractions 0.24, 0.40, 0.64: a window from 0.9 contains none of them.
  const none = await outputs(await open(t));
  const gatedOff = await outputs(await open(t, { controlnets: [cn({ conditioning_scale: 1, control_guidance_start: 0.9 })] }));
  const partial = await outputs(await open(t, { controlnets: [cn({ conditioning_scale: 1, control_guidance_end: 0.5 })] }));
  const full = await outputs(await open(t, { controlnets: [cn({ conditioning_scale: 1 })] }));
  t.equal(maxAbsDiff(none, gatedOff), 0);
  t.ok(maxAbsDiff(partial, none) > 0 && maxAbsDiff(partial, full) > 0, 'gating some slots differs from none and from all');
});

void t.test('two ControlNets sum; a canny preprocessor differs from passthrough', { timeout: 60_000 }, async (t) => {
  const one = await outputs(await open(t, { controlnets: [cn({ conditioning_scale: 0.7 })] }));
  const two = await outputs(await open(t, { controlnets: [cn({ conditioning_scale: 0.7 }), cn({ model_id: DEPTH, conditioning_scale: 0.7 })] }));
  const canny = await outputs(await open(t, { controlnets: [cn({ conditioning_scale: 0.7, preprocessor: 'canny', preprocessor_params: { low_threshold: 100, high_threshold: 200 } })] }));
  t.ok(maxAbsDiff(one, two) > 0);
  t.ok(maxAbsDiff(one, canny) > 0);
});

void t.test('a disabled ControlNet is not loaded (its files may be absent)', { timeout: 60_000 }, async (t) => {
  const color = 'thibaud/controlnet-sd21-color-diffusers';
  t.notOk(existsSync(join(dir, 'controlnet', color)));
  const p = await open(t, { controlnets: [cn({ model_id: color, conditioning_scale: 1, enabled: false })] });
  t.ok((await outputs(p)).length > 0);
  const q = await open(t);
  q.update(planChange(q.params, { controlnets: [cn({ model_id: color, conditioning_scale: 1 })] }));
  await q.whenIdle();
  t.match(q.status().lastError, /controlnet/, 'enabling it reloads and fails clearly without its files');
});

void t.test('ControlNets outside the family, duplicates and unimplemented preprocessors are refused', { timeout: 60_000 }, async (t) => {
  const p = await open(t);
  t.throws(() => p.update(planChange(p.params, { controlnets: [cn({ model_id: 'lllyasviel/control_v11p_sd15_canny' })] })), { code: 'INVALID_PARAMS' });
  t.throws(() => p.update(planChange(p.params, { controlnets: [cn(), cn()] })), { code: 'INVALID_PARAMS' });
  t.throws(() => p.update(planChange(p.params, { controlnets: [cn({ preprocessor: 'hed' })] })), { code: 'UNSUPPORTED_PROCESSOR' });
  t.throws(() => p.update(planChange(p.params, { controlnets: [cn({ model_id: 'daydreamlive/TemporalNet2-stable-diffusion-2-1' })] })), /6-channel/, 'TemporalNet2 is refused');
  t.same(p.params.controlnets, []);
});

void t.test('the family map follows ai-runner: sd21 → thibaud, sd15 → lllyasviel, sdxl → xinsir (+ TemporalNet2)', { timeout: 10_000 }, async (t) => {
  t.ok(CONTROLNETS_BY_FAMILY.sd21.includes(CANNY));
  t.ok(controlNetsFor('Lykon/dreamshaper-8').includes('lllyasviel/control_v11f1e_sd15_tile'));
  t.ok(controlNetsFor('stabilityai/sdxl-turbo').includes('xinsir/controlnet-canny-sdxl-1.0'));
  t.notOk(controlNetsFor('stabilityai/sdxl-turbo').includes(CANNY));
  t.ok(controlNetsFor('prompthero/openjourney-v4').includes('daydreamlive/TemporalNet2-stable-diffusion-v1-5'));
});

/**
 * The demo models the default start writes (demoModelOptions): every (model, ControlNet) pair and
 * every IP-Adapter model the API accepts runs on them, for every family, and ControlNets visibly
 * steer the output; real ControlNet exports are never overwritten; version marking.
 */
import { planChange } from '../../native/params/index.ts';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import {
  buildTinyModel,
  controlNetsFor,
  createFramePipeline,
  DEMO_MODEL_IDS,
  DEMO_MODEL_VERSION,
  demoModelOptions,
  isCurrentDemoModel,
  REFUSED_CONTROLNETS,
  runnableControlNetsFor,
  supportsIpAdapter,
  type Frame,
  type ParamsPatch,
} from '../../native/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'reverie-demo-'));
for (const id of DEMO_MODEL_IDS) buildTinyModel(dir, id, demoModelOptions(id));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const logger = pino({ level: 'silent' });
const W = 64;
const input: Frame = { width: W, height: W, data: Uint8Array.from({ length: W * W * 3 }, (_, i) => (Math.sin(i * 0.021) * 100 + 128) | 0), ptsMs: 0 };
const png = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'testsrc=size=64x64', '-frames:v', '1', '-f', 'image2pipe', '-vcodec', 'png', 'pipe:1']);
const base: ParamsPatch = { width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [20] };
const meanAbsDiff = (a: Uint8Array, b: Uint8Array) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += Math.abs(a[i]! - b[i]!);
  return s / a.length;
};

void t.test('every (model, ControlNet) pair the API accepts runs on the demo models, and conditioning_scale changes the output', { timeout: 240_000 }, async (t) => {
  let pairs = 0;
  for (const model of DEMO_MODEL_IDS) {
    for (const cn of runnableControlNetsFor(model)) {
      const p = await createFramePipeline({ modelsDir: dir, params: { ...base, model_id: model, controlnets: [{ model_id: cn, conditioning_scale: 1 }] }, logger });
      try {
        const s = p.status();
        t.equal(s.buildError, null, `${model} + ${cn}: built (${s.buildError ?? ''})`);
        t.equal(s.demo, true, `${model} + ${cn}: labelled demo`);
        const one = await p.process(input);
        t.same(p.update(planChange(p.params, { controlnets: [{ model_id: cn, conditioning_scale: 0.2 }] })), { mode: 'hot', hot: ['controlnets'], reload: [] });
        const other = await p.process(input);
        t.ok(one && other && meanAbsDiff(one.data, other.data) > 0.05, `${model} + ${cn}: output changes with conditioning_scale (mean |Δ| ${one && other ? meanAbsDiff(one.data, other.data).toFixed(3) : 'n/a'})`);
        pairs++;
      } finally {
        await p.close();
      }
    }
  }
  t.equal(pairs, 5 + 3 + 3 + 3, 'sd-turbo 5, sdxl-turbo 3, dreamshaper-8 3, openjourney-v4 3 (TemporalNet2 is refused)');
});

void t.test('every IP-Adapter model runs on the demo models and the style image changes the output', { timeout: 120_000 }, async (t) => {
  const models = DEMO_MODEL_IDS.filter((m) => supportsIpAdapter(m));
  t.same([...models].sort(), ['Lykon/dreamshaper-8', 'prompthero/openjourney-v4', 'stabilityai/sdxl-turbo']);
  for (const model of models) {
    const p = await createFramePipeline({
      modelsDir: dir,
      params: { ...base, model_id: model, ip_adapter: { enabled: true, scale: 1 }, ip_adapter_style_image_url: `data:image/png;base64,${png.toString('base64')}` },
      logger,
    });
    try {
      await p.whenIdle();
      const on = await p.process(input);
      t.equal(p.status().ipAdapter, 'ready', `${model}: ${p.status().ipAdapterError ?? 'ready'}`);
      p.update(planChange(p.params, { ip_adapter: null }));
      const off = await p.process(input);
      t.ok(on && off && meanAbsDiff(on.data, off.data) > 0.05, `${model}: the style image changes the output`);
    } finally {
      await p.close();
    }
  }
});

void t.test('demo folders carry their version and parts; TemporalNet2 is not built (it is refused)', { timeout: 30_000 }, async (t) => {
  for (const id of DEMO_MODEL_IDS) {
    t.ok(isCurrentDemoModel(dir, id), `${id} is a current demo model`);
    const index = JSON.parse(readFileSync(join(dir, id, 'model_index.json'), 'utf8')) as Record<string, unknown>;
    t.equal(index['_demo_version'], DEMO_MODEL_VERSION);
    for (const cn of controlNetsFor(id)) {
      if (cn in REFUSED_CONTROLNETS) t.notOk(demoModelOptions(id).controlNets?.includes(cn), `${cn} is not written`);
    }
  }
  const old = mkdtempSync(join(tmpdir(), 'reverie-demo-old-'));
  t.teardown(() => rmSync(old, { recursive: true, force: true }));
  buildTinyModel(old, 'Lykon/dreamshaper-8');
  t.notOk(isCurrentDemoModel(old, 'Lykon/dreamshaper-8'), 'a demo folder without ControlNets or image encoder is not current');
});

void t.test('a real ControlNet export is never overwritten by a demo one', { timeout: 30_000 }, async (t) => {
  const d = mkdtempSync(join(tmpdir(), 'reverie-demo-real-'));
  t.teardown(() => rmSync(d, { recursive: true, force: true }));
  const cnDir = join(d, 'controlnet', 'lllyasviel/control_v11p_sd15_canny');
  mkdirSync(cnDir, { recursive: true });
  writeFileSync(join(cnDir, 'model.onnx'), 'real export');
  writeFileSync(join(cnDir, 'config.json'), JSON.stringify({ block_out_channels: [320, 640, 1280, 1280] }));
  buildTinyModel(d, 'Lykon/dreamshaper-8', demoModelOptions('Lykon/dreamshaper-8'));
  t.equal(readFileSync(join(cnDir, 'model.onnx'), 'utf8'), 'real export');
});

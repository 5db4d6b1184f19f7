/**
 * The default start (stream roles with DEMO_MODELS on a fresh data dir: prepareModels writes the
 * demo models, the media node runs native's diffusion pipeline) with real WHIP publishers
 * (@roamhq/wrtc, VP8): one stream per (model, ControlNet) pair and per IP-Adapter model the API
 * accepts publishes and produces output frames, and those change with conditioning_scale; a stream
 * whose pipeline cannot be built keeps serving, reports ERROR with the reason, and recovers when a
 * PATCH fixes its params. Output frames are observed by wrapping the node's own processor factory
 * (nothing is replaced: the wrapper only copies what the real pipeline returns).
 */
import { execFileSync, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import type { Config } from '../../control/config.ts';
import { diffusionProcessorFactory, type FrameProcessorFactory } from '../../media/index.ts';
import { DEMO_MODEL_IDS, runnableControlNetsFor, supportsIpAdapter } from '../../native/index.ts';
import { startRolesServer, type Json } from '../helpers/rolesServer.ts';

const PUBLISHER = fileURLToPath(new URL('../media/fixtures/wrtcPublisher.ts', import.meta.url));

/** Output frames of one stream, as the real pipeline returned them (copies), with their arrival order. */
class Outputs {
  readonly frames = new Map<string, Uint8Array[]>();
  readonly #waiters = new Set<() => void>();
  push(streamId: string, data: Uint8Array): void {
    const list = this.frames.get(streamId) ?? [];
    list.push(Uint8Array.from(data));
    if (list.length > 8) list.shift();
    this.frames.set(streamId, list);
    this.count.set(streamId, (this.count.get(streamId) ?? 0) + 1);
    for (const w of [...this.#waiters]) w();
  }
  readonly count = new Map<string, number>();
  /** Resolves once `streamId` has produced `n` frames in all; rejects after `ms`. */
  waitFor(streamId: string, n: number, ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if ((this.count.get(streamId) ?? 0) < n) return;
        this.#waiters.delete(check);
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`${streamId}: ${this.count.get(streamId) ?? 0} of ${n} output frames within ${ms} ms`));
      }, ms);
      this.#waiters.add(check);
      check();
    });
  }
  last(streamId: string, k = 1): Uint8Array {
    const list = this.frames.get(streamId) ?? [];
    return list[list.length - k] as Uint8Array;
  }
}

const meanAbsDiff = (a: Uint8Array, b: Uint8Array) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += Math.abs(a[i]! - b[i]!);
  return s / a.length;
};

/** A real PNG style image (ffmpeg's test pattern). */
const STYLE_PNG = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'testsrc=size=96x96', '-frames:v', '1', '-f', 'image2pipe', '-vcodec', 'png', 'pipe:1']);
const STYLE_URL = 'https://style.example.test/style.png';


async function startDefault(t: Test) {
  const outputs = new Outputs();
  // The node's own factory, observed: each output frame is copied before it goes on to the encoder.
  // Style images: the one URL the test uses answers with a real PNG (the download itself is the
  // control plane's SSRF-safe client's business, tested with it).
  const fetchImage = async (url: string) => {
    if (url !== STYLE_URL) throw new Error(`unexpected style image ${url}`);
    return STYLE_PNG;
  };
  const observe = (config: Config): FrameProcessorFactory => {
    const real = diffusionProcessorFactory({ modelsDir: config.modelsDir, fetchImage });
    const observed: FrameProcessorFactory = async (params, ctx) => {
      const p = await real(params, ctx);
      return {
        process: async (frame) => {
          const out = await p.process(frame);
          if (out) outputs.push(ctx.streamId, out.data);
          return out;
        },
        update: (next) => p.update(next),
        close: () => p.close(),
        status: () => p.status?.() ?? {},
      };
    };
    if (real.passthrough) observed.passthrough = real.passthrough;
    return observed;
  };
  const { api, config, base, roles } = await startRolesServer(t, { createProcessor: observe });
  t.equal(config.demoModels, true, 'the default start writes demo models');
  /** The engine's own status of a stream's pipeline (native FramePipeline.status()). */
  const engine = (id: string) => (roles.node?.getStream(id)?.status().pipeline ?? null) as Json | null;
  return { api, outputs, config, base, engine };
}

/** A wrtc VP8 publisher of a solid colour on the stream's WHIP URL; killed by the returned function. */
async function publish(url: string, token: string): Promise<{ status: number; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', PUBLISHER, url, token, '200,120,60'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const first = await lines.next();
  const { status } = JSON.parse(String(first.value ?? '{"status":0}')) as { status: number };
  return {
    status,
    stop: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

// The file runs every demo pipeline: minutes, more on a loaded machine. Its subtests are bounded
// below; the runner's default per-file limit (300 s) is not its budget.
t.setTimeout(780_000);

// Small and quick: one Stream Batch slot at the smallest size the API takes.
const SMALL = { width: 384, height: 384, t_index_list: [20], acceleration: 'none', use_safety_checker: false } as const;

t.test('default start with demo models: every (model, ControlNet) pair and IP-Adapter model publishes, produces frames, and conditioning_scale steers them', { timeout: 600_000 }, async (t) => {
  const { api, outputs, engine } = await startDefault(t);
  const cases: { name: string; params: Json; change: Json }[] = [];
  for (const model of DEMO_MODEL_IDS) {
    for (const cn of runnableControlNetsFor(model)) {
      cases.push({
        name: `${model} + ${cn}`,
        params: { ...SMALL, model_id: model, controlnets: [{ model_id: cn, conditioning_scale: 1, preprocessor: cn.includes('canny') ? 'canny' : 'passthrough' }] },
        change: { controlnets: [{ model_id: cn, conditioning_scale: 0.1, preprocessor: cn.includes('canny') ? 'canny' : 'passthrough' }] },
      });
    }
    if (supportsIpAdapter(model)) {
      cases.push({
        name: `${model} + ip_adapter`,
        params: { ...SMALL, model_id: model, ip_adapter: { scale: 1 }, ip_adapter_style_image_url: STYLE_URL },
        change: { ip_adapter: { scale: 0 } },
      });
    }
  }
  t.equal(cases.filter((c) => c.name.endsWith('ip_adapter')).length, 3, 'IP-Adapter on sdxl-turbo, dreamshaper-8, openjourney-v4');
  t.equal(cases.length, 14 + 3);
  for (const c of cases) {
    const created = await api('POST', '/v1/streams', { params: c.params });
    t.equal(created.status, 201, `${c.name}: created`);
    if (created.status !== 201) continue;
    const s = created.body;
    const pub = await publish(s.whip_url, s.stream_key);
    try {
      t.equal(pub.status, 201, `${c.name}: WHIP publish accepted`);
      await outputs.waitFor(s.id, 4, 60_000);
      const st = (await api('GET', `/v1/streams/${s.id}/status`)).body.data;
      t.not(st.state, 'ERROR', `${c.name}: not in ERROR (${st.inference_status.last_error})`);
      t.equal(st.demo, true, `${c.name}: status says demo`);
      if (c.name.endsWith('ip_adapter')) {
        // The style image loads in the background; frames before it are unstyled.
        const deadline = Date.now() + 30_000;
        while (engine(s.id)?.['ipAdapter'] !== 'ready' && Date.now() < deadline) await outputs.waitFor(s.id, (outputs.count.get(s.id) ?? 0) + 1, 10_000);
        t.equal(engine(s.id)?.['ipAdapter'], 'ready', `${c.name}: style image encoded (${engine(s.id)?.['ipAdapterError'] ?? ''})`);
        await outputs.waitFor(s.id, (outputs.count.get(s.id) ?? 0) + 3, 30_000);
      }
      {
        // The publisher's VP8 encoder refines its first pictures of the still colour over a few
        // frames (and libwebrtc adapts quality when the machine is busy): a ControlNet that takes
        // the picture as it is (depth, passthrough) follows those changes, which once read as a
        // frame-to-frame noise of 1.2 against the scale's 1.6. Measure from two frames alike.
        const settle = Date.now() + 30_000;
        while (meanAbsDiff(outputs.last(s.id, 2), outputs.last(s.id, 1)) > 0.05 && Date.now() < settle) {
          await outputs.waitFor(s.id, (outputs.count.get(s.id) ?? 0) + 1, 10_000);
        }
        const a1 = outputs.last(s.id, 2);
        const a2 = outputs.last(s.id, 1);
        const patched = await api('PATCH', `/v1/streams/${s.id}`, { params: c.change });
        t.equal(patched.headers.get('x-params-update'), 'hot', `${c.name}: the scale change is hot`);
        const n = outputs.count.get(s.id) ?? 0;
        // The hot change reaches the pipeline thread before a later frame: 3 frames on is past it.
        await outputs.waitFor(s.id, n + 3, 30_000);
        const b = outputs.last(s.id);
        const jitter = meanAbsDiff(a1, a2);
        const moved = meanAbsDiff(a2, b);
        t.ok(moved > Math.max(0.05, 3 * jitter), `${c.name}: output changes with the scale (mean |Δ| ${moved.toFixed(3)} vs frame-to-frame ${jitter.toFixed(3)})`);
      }
    } finally {
      await pub.stop();
      await api('DELETE', `/v1/streams/${s.id}`);
    }
  }
});

t.test('a stream whose pipeline cannot be built keeps serving, reports ERROR with the reason, and recovers when a PATCH fixes it', { timeout: 180_000 }, async (t) => {
  const { api, outputs, config } = await startDefault(t);
  // An operator's ControlNet folder gone missing after start: the API still accepts the id.
  const CN = 'lllyasviel/control_v11f1e_sd15_tile';
  rmSync(join(config.modelsDir, 'controlnet', CN), { recursive: true, force: true });
  const created = await api('POST', '/v1/streams', { params: { ...SMALL, model_id: 'Lykon/dreamshaper-8', controlnets: [{ model_id: CN }] } });
  t.equal(created.status, 201);
  const s = created.body;
  const pub = await publish(s.whip_url, s.stream_key);
  t.teardown(pub.stop);
  t.equal(pub.status, 201);
  await outputs.waitFor(s.id, 4, 60_000);
  t.pass('output frames keep coming (the image processors alone serve)');
  let st = (await api('GET', `/v1/streams/${s.id}/status`)).body.data;
  t.equal(st.state, 'ERROR', `the status reports an error state (${JSON.stringify(st).slice(0, 600)})`);
  t.match(st.inference_status.last_error, /control_v11f1e_sd15_tile|controlnet/i, 'and the reason');
  t.match(st.gateway_status.error?.error_message ?? '', /cannot be built/);

  const fixed = await api('PATCH', `/v1/streams/${s.id}`, { params: { controlnets: [] } });
  t.equal(fixed.status, 200);
  t.equal(fixed.headers.get('x-params-update'), 'reload');
  const deadline = Date.now() + 60_000;
  for (;;) {
    st = (await api('GET', `/v1/streams/${s.id}/status`)).body.data;
    if (st.state !== 'ERROR' || Date.now() > deadline) break;
    await outputs.waitFor(s.id, (outputs.count.get(s.id) ?? 0) + 1, 10_000);
  }
  t.not(st.state, 'ERROR', 'recovered after the fixing PATCH');
  const n = outputs.count.get(s.id) ?? 0;
  await outputs.waitFor(s.id, n + 3, 30_000);
  t.pass('and frames keep coming from the rebuilt diffusion pipeline');
  await api('DELETE', `/v1/streams/${s.id}`);
});

/**
 * No lost update: a PATCH that arrives while the stream's processor is still being built (a model
 * load takes seconds with real weights), or before the publisher has arrived at all (with or
 * without a viewer waiting), is what the frames show once the processor runs.
 *
 * The app is the embedded default with real WHIP publishers (@roamhq/wrtc) and a real WHEP viewer
 * (for the viewer-first case). In the first three tests the processor is the test's own: its output
 * colour is a function of `prompt`, so a frame says which params the processor really applied, and
 * its construction waits on a gate the test opens, so "during the load" is a fact and not a race.
 * The last one runs the engine itself (native's frame pipeline in its worker threads, on the demo
 * models the node prepares), held at the same gate, and reads the change in what a viewer decodes.
 */
import { wrtcPublish } from '../media/wrtcPeers.ts';
import t, { type Test } from 'tap';
import { diffusionProcessorFactory, type Frame, type FrameProcessorFactory, type LiveParams } from '../../media/index.ts';
import { startRolesServer } from '../helpers/rolesServer.ts';
import { wrtcView } from '../media/wrtcPeers.ts';


/** The colour each prompt paints (RGB); anything else paints grey. */
const COLOURS: Record<string, [number, number, number]> = { red: [220, 30, 30], blue: [30, 30, 220] };
const colourOf = (params: LiveParams): [number, number, number] => COLOURS[String(params['prompt'])] ?? [128, 128, 128];

/** A gate per stream: the processor's construction waits until the test opens it. */
class Gates {
  readonly #open = new Map<string, () => void>();
  readonly #waiting = new Map<string, Promise<void>>();
  readonly #entered = new Map<string, { promise: Promise<void>; resolve: () => void }>();
  #slot(id: string) {
    let e = this.#entered.get(id);
    if (!e) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      e = { promise, resolve };
      this.#entered.set(id, e);
      this.#waiting.set(id, new Promise<void>((r) => this.#open.set(id, r)));
    }
    return e;
  }
  /** Called by the factory: signals that the load began, then waits for the gate. */
  async pass(id: string): Promise<void> {
    this.#slot(id).resolve();
    await this.#waiting.get(id);
  }
  /** Resolves once the processor of `id` is being built. */
  entered(id: string): Promise<void> {
    return this.#slot(id).promise;
  }
  open(id: string): void {
    this.#slot(id);
    this.#open.get(id)?.();
  }
}

/** Colours of the frames a stream's processor returned, newest last, with waiters. */
class Outputs {
  readonly #last = new Map<string, [number, number, number]>();
  readonly #count = new Map<string, number>();
  readonly #waiters = new Set<() => void>();
  push(id: string, rgb: [number, number, number]): void {
    this.#last.set(id, rgb);
    this.#count.set(id, (this.#count.get(id) ?? 0) + 1);
    for (const w of [...this.#waiters]) w();
  }
  count(id: string): number {
    return this.#count.get(id) ?? 0;
  }
  last(id: string): [number, number, number] | undefined {
    return this.#last.get(id);
  }
  waitFor(id: string, n: number, ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.count(id) < n) return;
        this.#waiters.delete(check);
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`${id}: ${this.count(id)} of ${n} output frames within ${ms} ms`));
      }, ms);
      this.#waiters.add(check);
      check();
    });
  }
}

async function start(t: Test) {
  const gates = new Gates();
  const outputs = new Outputs();
  const built = new Map<string, LiveParams>();
  const factory: FrameProcessorFactory = async (initial, ctx) => {
    await gates.pass(ctx.streamId);
    let params: LiveParams = { ...initial };
    built.set(ctx.streamId, { ...initial });
    return {
      process: async (frame: Frame) => {
        const rgb = colourOf(params);
        const data = new Uint8Array(frame.width * frame.height * 3);
        for (let i = 0; i < data.length; i += 3) data.set(rgb, i);
        outputs.push(ctx.streamId, rgb);
        return { ...frame, data };
      },
      // A planned change: its target is the params from the next frame on.
      update: (change) => {
        params = change.target;
      },
      close: () => undefined,
    };
  };
  const { api, base, roles } = await startRolesServer(t, { createProcessor: () => factory });
  return { api, gates, outputs, built, base, roles };
}

const SMALL = { width: 384, height: 384, prompt: 'red' } as const;

t.test('a PATCH during the processor load is what the frames show once it is ready', { timeout: 120_000 }, async (t) => {
  const { api, gates, outputs, built } = await start(t);
  const created = await api('POST', '/v1/streams', { params: SMALL });
  t.equal(created.status, 201, 'created');
  const s = created.body;
  t.equal((await wrtcPublish(t, s.whip_url, [200, 200, 200], s.stream_key)).status, 201, 'WHIP publish accepted');
  await gates.entered(s.id);
  const patched = await api('PATCH', `/v1/streams/${s.id}`, { params: { prompt: 'blue' } });
  t.equal(patched.status, 200, 'PATCH during the load → 200');
  gates.open(s.id);
  await outputs.waitFor(s.id, 5, 60_000);
  t.equal(built.get(s.id)?.['prompt'], 'red', 'the processor was built from the params before the PATCH');
  t.same(outputs.last(s.id), COLOURS['blue'], 'the frames show the PATCHed prompt');
  const st = (await api('GET', `/v1/streams/${s.id}/status`)).body.data;
  t.equal(st.inference_status.last_params.prompt, 'blue', 'status last_params agrees with the frames');
});

t.test('a PATCH before the publisher arrives is what the frames show', { timeout: 120_000 }, async (t) => {
  const { api, gates, outputs } = await start(t);
  const created = await api('POST', '/v1/streams', { params: SMALL });
  t.equal(created.status, 201, 'created');
  const s = created.body;
  const patched = await api('PATCH', `/v1/streams/${s.id}`, { params: { prompt: 'blue' } });
  t.equal(patched.status, 200, 'PATCH with no publisher → 200');
  gates.open(s.id);
  t.equal((await wrtcPublish(t, s.whip_url, [200, 200, 200], s.stream_key)).status, 201, 'WHIP publish accepted');
  await outputs.waitFor(s.id, 5, 60_000);
  t.same(outputs.last(s.id), COLOURS['blue'], 'the frames show the PATCHed prompt');
});

t.test('a PATCH while a viewer waits for the publisher, and again during the load, is what the frames show', { timeout: 120_000 }, async (t) => {
  const { api, gates, outputs, base } = await start(t);
  const created = await api('POST', '/v1/streams', { params: SMALL });
  t.equal(created.status, 201, 'created');
  const s = created.body;
  const viewer = await wrtcView(t, `${base}/live/${s.output_playback_id}/whep`);
  t.equal(viewer.status, 201, 'the viewer is answered before the publisher');
  t.equal((await api('PATCH', `/v1/streams/${s.id}`, { params: { prompt: 'blue' } })).status, 200, 'PATCH with a viewer and no publisher → 200');
  t.equal((await wrtcPublish(t, s.whip_url, [200, 200, 200], s.stream_key)).status, 201, 'WHIP publish accepted');
  await gates.entered(s.id);
  t.equal((await api('PATCH', `/v1/streams/${s.id}`, { params: { prompt: 'red' } })).status, 200, 'PATCH back during the load → 200');
  t.equal((await api('PATCH', `/v1/streams/${s.id}`, { params: { prompt: 'blue' } })).status, 200, 'and again');
  gates.open(s.id);
  await outputs.waitFor(s.id, 5, 60_000);
  t.same(outputs.last(s.id), COLOURS['blue'], 'the processor applies the latest prompt');
  // The viewer decodes the processed picture: blue dominates (VP8 and YUV round trips blur it a little).
  const r = await viewer.waitReport((r) => r.frames >= 5 && r.meanU > 170, 30_000);
  t.ok(r.meanU > 170, `the viewer sees blue (U mean ${r.meanU.toFixed(0)})`);
});

t.test('the engine built during a PATCH runs the PATCHed params (real frame pipeline, viewer first)', { timeout: 180_000 }, async (t) => {
  const gates = new Gates();
  // The node's own engine factory; only its start waits for the gate.
  const { api, base, roles } = await startRolesServer(t, { createProcessor: (config) => {
    const engine = diffusionProcessorFactory({ modelsDir: config.modelsDir });
    return Object.assign(
      async (params: LiveParams, ctx: Parameters<FrameProcessorFactory>[1]) => {
        await gates.pass(ctx.streamId);
        return engine(params, ctx);
      },
      { passthrough: engine.passthrough! },
    );
  } });
  // The image chains alone (skip_diffusion): a blur keeps the publisher's flat grey, canny edges of
  // a flat picture are black, so the viewer's luma says which chain the engine runs.
  const BLUR = { image_postprocessing: { processors: [{ type: 'blur' }] } };
  const CANNY = { image_postprocessing: { processors: [{ type: 'canny', params: { low_threshold: 100, high_threshold: 200 } }] } };
  const created = await api('POST', '/v1/streams', { params: { width: 384, height: 384, skip_diffusion: true, ...BLUR } });
  t.equal(created.status, 201, 'created');
  const s = created.body;
  const viewer = await wrtcView(t, `${base}/live/${s.output_playback_id}/whep`);
  t.equal(viewer.status, 201, 'the viewer is answered before the publisher');
  t.equal((await wrtcPublish(t, s.whip_url, [200, 200, 200], s.stream_key)).status, 201, 'WHIP publish accepted');
  await gates.entered(s.id);
  t.equal(roles.node!.getStream(s.id)?.status().processor, 'loading', 'the engine is being built');
  const patched = await api('PATCH', `/v1/streams/${s.id}`, { params: CANNY });
  t.equal(patched.status, 200, 'PATCH during the load → 200');
  t.equal(patched.headers.get('x-params-update-by'), 'api', 'no engine ran it yet: the API planned it');
  gates.open(s.id);
  const r = await viewer.waitReport((r) => r.frames >= 5 && r.meanY < 30, 90_000);
  t.ok(r.extremeFraction > 0.9, `the viewer sees the canny output of the PATCH (meanY ${r.meanY.toFixed(1)}, extreme ${r.extremeFraction.toFixed(3)})`);
  const pipeline = roles.node!.getStream(s.id)?.status().pipeline as { restartCount: number } | null;
  t.equal(pipeline?.restartCount, 0, 'applied hot on the built engine, no reload');
});

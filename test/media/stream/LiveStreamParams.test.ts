/**
 * A stream's params converge on the newest ones, whichever path they take to the node: a PATCH
 * that reaches the node while a publisher's grant is still being resolved (the grant read the
 * store before the PATCH, and the node held no stream to apply it to) is what the frames show, and
 * a stale grant does not undo a newer PATCH on a stream a viewer made. The processor paints each
 * frame in a colour that is a function of `prompt`, so a frame says which params it applied.
 */
import { mergeParams, planChange, type ParamsPatch } from '../../../native/params/index.ts';
import t from 'tap';
import type { Frame, FrameProcessorFactory, IngestGrant, LiveParams } from '../../../media/index.ts';
import { STREAM_ID, STREAM_KEY, startMediaServer } from '../harness.ts';
import { wrtcPublish, wrtcView } from '../wrtcPeers.ts';

const COLOURS: Record<string, [number, number, number]> = { red: [220, 30, 30], blue: [30, 30, 220] };

/** Colour processor and the colours of the frames it returned. */
function colourProcessor() {
  const seen: string[] = [];
  const waiters = new Set<() => void>();
  const factory: FrameProcessorFactory = async (initial) => {
    let params: LiveParams = { ...initial };
    return {
      process: async (frame: Frame) => {
        const prompt = String(params['prompt']);
        const rgb = COLOURS[prompt] ?? [128, 128, 128];
        const data = new Uint8Array(frame.width * frame.height * 3);
        for (let i = 0; i < data.length; i += 3) data.set(rgb, i);
        seen.push(prompt);
        for (const w of [...waiters]) w();
        return { ...frame, data };
      },
      // A planned change: the processor takes its target as it is.
      update: (change) => {
        params = change.target;
      },
      close: () => undefined,
    };
  };
  const frames = (n: number, ms: number) =>
    new Promise<string[]>((resolve, reject) => {
      const check = () => {
        if (seen.length < n) return;
        waiters.delete(check);
        clearTimeout(timer);
        resolve(seen.slice(-3));
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(new Error(`${seen.length} of ${n} processed frames within ${ms} ms`));
      }, ms);
      waiters.add(check);
      check();
    });
  return { factory, frames, seen };
}

/** A grant the test holds back: resolveIngest reports that it was asked, then waits. */
function heldGrant(grant: IngestGrant) {
  let asked!: () => void;
  const wasAsked = new Promise<void>((r) => (asked = r));
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  const resolveIngest = async (streamId: string, token: string) => {
    if (streamId !== STREAM_ID || token !== STREAM_KEY) return null;
    asked();
    await released;
    return grant;
  };
  return { resolveIngest, wasAsked, release };
}

t.test('a PATCH that reaches the node while the publisher’s grant resolves is what the frames show', { timeout: 90_000 }, async (t) => {
  const storedAt = Date.now();
  const grant = heldGrant({ streamId: STREAM_ID, params: { width: 256, height: 256, prompt: 'red' }, paramsStoredAt: storedAt });
  const proc = colourProcessor();
  const srv = await startMediaServer(t, { createProcessor: proc.factory, resolveIngest: grant.resolveIngest });
  const publishing = wrtcPublish(t, srv.whipUrl, [200, 200, 200]);
  await grant.wasAsked;
  t.equal(srv.node.getStream(STREAM_ID), undefined, 'the node holds no stream while the grant resolves');
  // What the API sends: the change planned once over the stored params (the grant's).
  const patched = planChange(mergeParams(null, { width: 256, height: 256, prompt: 'red' }), { prompt: 'blue' });
  t.equal(srv.node.updateParams(STREAM_ID, patched, storedAt + 5), null, 'the PATCH finds no stream to apply to');
  grant.release();
  t.equal((await publishing).status, 201, 'WHIP publish accepted');
  const last = await proc.frames(5, 30_000);
  t.same(last, ['blue', 'blue', 'blue'], 'the frames show the PATCH, not the older grant');
  t.equal(srv.node.status(STREAM_ID)?.params['prompt'], 'blue', 'and the status agrees');
});

t.test('a grant older than a PATCH a viewer-made stream got does not undo it; its other keys still apply', { timeout: 90_000 }, async (t) => {
  const storedAt = Date.now();
  const grant = heldGrant({ streamId: STREAM_ID, params: { width: 256, height: 256, prompt: 'red', seed: 42 }, paramsStoredAt: storedAt });
  const proc = colourProcessor();
  const srv = await startMediaServer(t, { createProcessor: proc.factory, resolveIngest: grant.resolveIngest });
  const viewer = await wrtcView(t, srv.whepUrl);
  t.equal(viewer.status, 201, 'the viewer is answered before the publisher');
  const publishing = wrtcPublish(t, srv.whipUrl, [200, 200, 200]);
  await grant.wasAsked;
  // What the API sends: the change planned once over the stored params (the grant's), full.
  const patched = planChange(mergeParams(null, { width: 256, height: 256, prompt: 'red', seed: 42 }), { prompt: 'blue' });
  t.same(srv.node.updateParams(STREAM_ID, patched, storedAt + 5), { plan: null }, 'the PATCH reaches the stream the viewer made (no processor ran it yet: no plan)');
  grant.release();
  t.equal((await publishing).status, 201, 'WHIP publish accepted');
  const last = await proc.frames(5, 30_000);
  t.same(last, ['blue', 'blue', 'blue'], 'the frames show the PATCH');
  const params = srv.node.status(STREAM_ID)?.params;
  t.equal(params?.['prompt'], 'blue', 'status: the PATCHed prompt');
  t.equal(params?.['seed'], 42, 'status: the stored keys the PATCH did not change');
  t.equal(params?.['width'], 256, 'status: the stored size');
  const r = await viewer.waitReport((r) => r.frames >= 5 && r.meanU > 170, 30_000);
  t.ok(r.meanU > 170, `the viewer sees blue (U mean ${r.meanU.toFixed(0)})`);
});

t.test('unversioned updates always apply, and a newer grant replaces older params', { timeout: 30_000 }, async (t) => {
  const srv = await startMediaServer(t, {});
  const stream = srv.node.createStream('str_test_versions', { prompt: 'a' });
  // As the API plans a PATCH: once, over what the stream holds.
  const change = (patch: ParamsPatch) => planChange(mergeParams(null, stream.params), patch);
  t.equal(stream.updateParams(change({ prompt: 'b' }), 2000).stale, false, 'versioned update applies');
  t.equal(stream.updateParams(change({ prompt: 'c' }), 1000).stale, true, 'an older one is stale');
  t.equal(stream.params['prompt'], 'b', 'and changes nothing it holds');
  t.equal(stream.updateParams(change({ prompt: 'd' })).stale, false, 'an unversioned one applies');
  t.equal(stream.grant({ ...stream.params, prompt: 'e' }, 3000).stale, false, 'a newer grant applies');
  t.equal(stream.params['prompt'], 'e');
  t.equal(stream.grant({ ...stream.params, prompt: 'f' }, 2500).stale, true, 'an older grant is stale');
  t.equal(stream.params['prompt'], 'e', 'and changes nothing it holds');
});

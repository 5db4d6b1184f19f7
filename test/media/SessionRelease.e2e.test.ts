/**
 * Once a stream and its viewers are gone, nothing of them stays reachable: the LiveStream (with
 * its frame pipeline and frame buffers) and every WhepSession are garbage for V8 to collect. A
 * native library that keeps a callback alive keeps everything the callback can reach: the 30-minute
 * soak found every stream and viewer of the run still held at rest (node-datachannel holds a
 * track's onMessage callback until the track itself is closed, and that callback reached the
 * session, its listeners and so the stream), about 5 MiB of frames per diffusion stream.
 *
 * Real parts: the media node over HTTP, an OBS-like publisher and two receive-only WHEP viewers
 * (libdatachannel, in a child process). V8's `gc` is reached as EngineWorker does.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import t from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';
import { until } from '../helpers/until.ts';
import { PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer } from './harness.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

t.test('a closed stream and its closed WHEP sessions are garbage (no native callback keeps them)', { timeout: 90_000 }, async (t) => {
  const srv = await startMediaServer(t, { settings: { idleStreamMs: 200 } });
  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 120 });
  const pub = await pubs.publish({ url: srv.whipUrl, token: STREAM_KEY, source });
  t.equal(pub.status, 201, 'published');
  await pubs.waitState(pub.id, 'connected', 15_000);

  const viewers = [];
  for (let i = 0; i < 2; i++) {
    const v = await pubs.play({ url: `${srv.baseUrl}/live/${PLAYBACK_ID}/whep` });
    t.equal(v.status, 201, `viewer ${i} answered`);
    viewers.push(v);
  }
  // The node's own objects, held only weakly from here on.
  const stream = new WeakRef(srv.node.getStream(STREAM_ID) as object);
  const sessions = viewers.map((v) => {
    const id = (v.location ?? '').split('/').pop() ?? '';
    const entry = srv.node.getSession(id);
    if (entry?.kind !== 'whep') throw new Error(`no WHEP session ${id}`);
    const ref = new WeakRef(entry.session);
    return { ref, connected: () => ref.deref()?.connected === true };
  });
  await until('both viewers connected (their RTCP reaches the tracks)', () => sessions.map((s) => s.connected()), (c) => c.every(Boolean), 15_000);
  await until('frames out to the viewers', () => srv.node.getStream(STREAM_ID)?.status().framesOut ?? 0, (n) => n > 10, 15_000);

  for (const v of viewers) await pubs.stop(v.id);
  await pubs.stop(pub.id);
  await until('the node releases the stream', () => srv.node.getStream(STREAM_ID) === undefined, Boolean, 10_000);

  // A WeakRef's target lives until the end of the job that read it: collect on later turns.
  const held = () => {
    gc();
    return { stream: stream.deref() !== undefined, sessions: sessions.filter((s) => s.ref.deref() !== undefined).length };
  };
  const left = await until('the stream and its sessions collected', held, (h) => !h.stream && h.sessions === 0, 10_000).catch((err: Error) => err.message);
  t.same(left, { stream: false, sessions: 0 }, 'nothing of the stream or its viewers is reachable');
});

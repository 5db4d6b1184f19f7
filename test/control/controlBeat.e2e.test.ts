/**
 * Beat-locked changes on a live stream, end to end: the real server (api + media node), an
 * OBS-like WHIP publisher at 30 fps, the control WebSocket. The node applies each `on_beat` change
 * to the first frame captured at or after its beat and names it in the ack: the frame before it
 * was captured before the beat, the frame itself at or after it, so the error is under one frame
 * interval (33.3 ms at 30 fps). Capture times are the publisher's RTP clock placed on the node's
 * clock (media/stream/LiveStream.ts), so a busy machine delaying packets does not move them.
 */
import t from 'tap';
import { stampedH264 } from '../helpers/h264Source.ts';
import { openControl } from '../helpers/controlClient.ts';
import { startLiveServer, type Json } from '../helpers/liveServer.ts';
import { startObsPublishers } from '../helpers/obsPublisher.ts';

const FPS = 30;
const FRAME_MS = 1000 / FPS;

t.test('on_beat changes land on the first frame at or after their beat: within one frame interval', { timeout: 180_000 }, async (t) => {
  const { server, api, key } = await startLiveServer(t, { env: { ROLES: 'api,media' } });
  // Nothing to process: frames go straight from decoder to encoder at the publisher's 30 fps.
  const created = await api('POST', '/v1/streams', { params: { prompt: 'beats', width: 384, height: 384, skip_diffusion: true } });
  t.equal(created.status, 201, 'stream created');
  const id = created.body['id'] as string;
  const pubs = startObsPublishers(t);
  const pub = await pubs.publish({ url: `${server.url}/live/${id}/whip`, token: created.body['stream_key'] as string, source: await stampedH264({ size: 256, frames: 300, fps: FPS }) });
  t.equal(pub.status, 201, 'publisher live');

  const c = await openControl(t, `${server.url.replace('http', 'ws')}/v1/streams/${id}/control`, { authorization: `Bearer ${key}` });
  const hello = await c.next((m) => m.type === 'hello');
  // Wait (pushed, not polled) until frames flow.
  await c.next((m) => m.type === 'stats' && m.output_fps > 20, 60_000);

  const bpm = 120; // a beat every 500 ms
  c.send({ type: 'tempo', bpm, phase: hello.server_time });
  await c.next((m) => m.type === 'tempo');

  // A change a second ahead shows in status until the node applies it.
  c.send({ type: 'update', id: 'later', params: { seed: 5 }, at: Date.now() + 1500 });
  const q = await c.next((m) => m.type === 'queued' && m.id === 'later');
  const st = await api('GET', `/v1/streams/${id}/status`);
  t.same(
    (st.body['data']['scheduled_updates'] as Json[]).map((s) => s['id']),
    ['later'],
    'status lists the waiting change',
  );
  const later = await c.next((m) => m.type === 'ack' && m.id === 'later', 10_000);
  t.equal(later.due_at, q.due_at);
  t.type(later.frame, 'number', `landed on frame ${later.frame}`);
  t.ok(later.prev_frame_at < later.due_at && later.frame_at >= later.due_at, 'on the first frame at or after its time');
  const after = await api('GET', `/v1/streams/${id}/status`);
  t.notOk('scheduled_updates' in after.body['data'], 'gone from status once applied');

  const errors: number[] = [];
  let excused = 0;
  let lastFrame = later.frame as number;
  for (let i = 0; i < 10; i++) {
    // A change that reaches the server within 1 ms of a beat is applied at once, unscheduled, as
    // documented: send each one away from the beat it would land on (same clock: one machine).
    const toBeat = 500 - ((Date.now() - hello.server_time) % 500);
    if (toBeat < 100) await new Promise((r) => setTimeout(r, toBeat + 20));
    const skippedBefore = (await pubs.stats(pub.id)).framesSkipped;
    c.send({ type: 'update', id: `b${i}`, params: { seed: 100 + i }, on_beat: true });
    const queued = await c.next((m) => m.id === `b${i}` && m.type === 'queued');
    const ack = await c.next((m) => m.id === `b${i}` && m.type === 'ack', 10_000);
    const skipped = (await pubs.stats(pub.id)).framesSkipped - skippedBefore;
    t.equal(ack.due_at, queued.due_at);
    t.equal(Math.round((ack.due_at - hello.server_time) % 500), 0, 'due on a beat');
    if (typeof ack.frame !== 'number' || typeof ack.frame_at !== 'number' || typeof ack.prev_frame_at !== 'number') {
      t.fail(`b${i}: no frame in the ack ${JSON.stringify(ack)}`);
      continue;
    }
    t.ok(ack.frame > lastFrame, 'a later frame than the change before');
    lastFrame = ack.frame;
    // The frame before was not due; this one is: it is the first frame at or after the beat.
    t.ok(ack.prev_frame_at < ack.due_at, `b${i}: the frame before was captured before the beat (${(ack.prev_frame_at - ack.due_at).toFixed(1)} ms)`);
    t.ok(ack.frame_at >= ack.due_at, `b${i}: the frame that carries it was captured at or after the beat`);
    const err = ack.frame_at - ack.due_at;
    // The publisher paces by the wall clock and skips the frames whose tick came late (a loaded
    // machine held its process up), as a capture card does: then no frame was captured near the
    // beat and the first one after it is later by the gap. Such a beat is excused only when the
    // publisher itself reports the missing frames (the capture gap less the one interval it
    // always spans), so frames the node lost still fail.
    const gapFrames = Math.round((ack.frame_at - ack.prev_frame_at) / FRAME_MS) - 1;
    if (err > FRAME_MS + 0.01 && gapFrames > 0 && skipped >= gapFrames) {
      t.comment(`b${i}: ${err.toFixed(1)} ms after its beat: the publisher skipped ${skipped} frames there (gap of ${gapFrames})`);
      excused++;
      continue;
    }
    errors.push(err);
    t.ok(err <= FRAME_MS + 0.01, `b${i}: ${err.toFixed(1)} ms after its beat, within one frame interval (${FRAME_MS.toFixed(1)} ms)`);
  }
  t.comment(`beat-lock error (frame capture − beat), ms: ${errors.map((e) => e.toFixed(1)).join(', ')}`);
  t.ok(excused <= 3, `at most 3 of 10 beats fell in a gap of the publisher's own (${excused})`);
  await pubs.stop(pub.id);
});

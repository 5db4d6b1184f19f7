/**
 * Closing a pipeline gives back everything it held, at once and without waiting for V8's GC:
 * the GstPipeline itself (counted by the addon), its bus's GstPoll socket pair, the frame pool
 * our pushes draw from, and the codecs' threads. Every publisher session builds and closes such
 * pipelines, so anything left behind here grows the node for as long as it runs (the soak).
 */
import { readdirSync, readlinkSync } from 'node:fs';
import pino from 'pino';
import t from 'tap';
import { AppPipeline } from '../../media/gst/AppPipeline.ts';
import { DecoderBin } from '../../media/gst/DecoderBin.ts';
import { EncoderBin } from '../../media/gst/EncoderBin.ts';
import { loadGst } from '../../media/gst/gst.ts';
import { H264Packetizer } from '../../media/webrtc/H264Packetizer.ts';
import { H264Depacketizer } from '../../media/webrtc/H264Depacketizer.ts';
import { RtpPacket } from 'werift';

const logger = pino({ level: 'silent' });

/** What this process holds now, from /proc (Linux). */
function held(): { sockets: number; threads: number; pipelines: number } {
  let sockets = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).startsWith('socket:')) sockets++;
    } catch {
      // closed between readdir and readlink (readdir's own descriptor)
    }
  }
  return { sockets, threads: readdirSync('/proc/self/task').length, pipelines: loadGst().livePipelines() };
}

/** Resolves when `done()` holds, checking on each event-loop turn that `step` drives; bounded. */
async function until(done: () => boolean, step: () => void, what: string, max = 150): Promise<void> {
  for (let i = 0; i < max && !done(); i++) {
    step();
    await new Promise((r) => setTimeout(r, 33));
  }
  if (!done()) throw new Error(`${what}: not reached after ${max} steps`);
}

// One pipeline first: GStreamer's own process-wide objects (registry, clock, thread pools) are
// created on first use and are not ours to count.
new AppPipeline({ launch: 'appsrc name=src ! fakesink name=x appsink name=sink', what: 'warm-up', logger, onSample: () => undefined }).close();

t.test('closing idle AppPipelines frees each GstPipeline and its bus sockets, without a GC', async (t) => {
  const before = held();
  for (let i = 0; i < 20; i++) {
    new AppPipeline({ launch: 'appsrc name=src ! fakesink name=x appsink name=sink', what: 'idle', logger, onSample: () => undefined }).close();
  }
  const after = held();
  t.equal(after.sockets, before.sockets, `socket descriptors back to ${before.sockets} (now ${after.sockets})`);
  t.equal(after.pipelines, before.pipelines, `no GstPipeline outlives close() (live: ${before.pipelines} → ${after.pipelines})`);
});

t.test('pipelines that carried frames (buffer pool on the appsrc side, samples out) leave nothing', { timeout: 30_000 }, async (t) => {
  const W = 256;
  const frame = new Uint8Array(W * W * 3); // 196 kB: above the addon's pool threshold
  const launch = `appsrc name=src is-live=true format=time do-timestamp=true caps="video/x-raw,format=RGB,width=${W},height=${W},framerate=30/1" ! videoconvert ! video/x-raw,format=I420 ! appsink name=sink max-buffers=1 drop=true sync=false`;
  const before = held();
  for (let i = 0; i < 8; i++) {
    let samples = 0;
    const bin = new AppPipeline({ launch, what: 'frames', logger, onSample: () => samples++ });
    await until(() => samples >= 3, () => bin.push(frame), 'converted frames');
    bin.close();
  }
  const after = held();
  t.equal(after.sockets, before.sockets, `socket descriptors back to ${before.sockets} (now ${after.sockets})`);
  t.equal(after.pipelines, before.pipelines, `live GstPipelines back to ${before.pipelines} (now ${after.pipelines})`);
});

t.test('a publisher-like encode → RTP → decode chain, built and closed 5 times, leaves nothing', { timeout: 60_000 }, async (t) => {
  const W = 160;
  const H = 120;
  const rgb = new Uint8Array(W * H * 3).fill(128);
  const round = async () => {
    let decoded = 0;
    const dec = new DecoderBin({ codec: 'H264', width: 128, height: 128, threads: 1, logger, onFrame: () => decoded++ });
    const pk = new H264Packetizer({ ssrc: 1, payloadType: 96, maxPayload: 1200 });
    const depack = new H264Depacketizer();
    let ts = 0;
    const enc = new EncoderBin({
      width: W, height: H, fps: 30, bitrateKbps: 500, keyIntFrames: 30, keyUnitMinIntervalMs: 100, logger,
      onAccessUnit: (au) => {
        ts += 3000;
        for (const p of pk.packetize(au.nals, ts)) {
          const packet = RtpPacket.deSerialize(p);
          const { frame } = depack.push({ sequenceNumber: packet.header.sequenceNumber, timestamp: packet.header.timestamp, marker: packet.header.marker, payload: packet.payload });
          if (frame && !dec.closed) dec.push(frame.data);
        }
      },
    });
    let pts = 0;
    await until(() => decoded >= 5, () => enc.push({ width: W, height: H, data: rgb, ptsMs: (pts += 33) }), 'decoded frames');
    enc.close();
    dec.close();
    return decoded;
  };
  await round(); // the codecs' process-wide state (libav, x264 tables) is made once
  const before = held();
  let decoded = 0;
  for (let i = 0; i < 5; i++) decoded += await round();
  const after = held();
  t.ok(decoded >= 25, `frames went through every round (${decoded})`);
  t.equal(after.sockets, before.sockets, `socket descriptors back to ${before.sockets} (now ${after.sockets})`);
  t.equal(after.pipelines, before.pipelines, `live GstPipelines back to ${before.pipelines} (now ${after.pipelines})`);
  // GStreamer runs its streaming threads from GLib's shared thread pool, which keeps up to 2 idle
  // threads for reuse (g_thread_pool_set_max_unused_threads' default): whether they are parked when
  // a count is taken is timing (CI once saw 16 after 15). A leak grows with the rounds: one thread a
  // round is 5 here.
  t.ok(after.threads <= before.threads + 2, `threads back to ${before.threads} (+ GLib's 2 idle pool threads) or fewer (now ${after.threads})`);
});

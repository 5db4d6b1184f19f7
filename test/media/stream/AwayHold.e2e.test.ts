/**
 * A stream whose publisher left and that has no WHEP viewer is released after idleStreamMs —
 * unless its output is still consumed, then the node holds it (serving the slate) while it is,
 * for idleHoldMaxMs at most. Real parts: the media node over HTTP, OBS-like publishers
 * (libdatachannel, H.264), an LL-HLS "player" polling the real playlist and segments, and an RTMP
 * push into nginx-rtmp. Three streams publish, then their publishers leave (WHIP DELETE):
 *
 * - A has an HLS player that keeps polling: held past idleStreamMs with slate segments still
 *   coming, then released at the hold limit although the player still polls;
 * - B has no consumer: released after idleStreamMs, as before;
 * - C has an RTMP destination: held while the push runs; switching the destination off (nothing
 *   consumes it any more) releases it within a check or two.
 */
import t from 'tap';
import { AddressPolicy } from '../../../outbound/index.ts';
import { stampedH264 } from '../../helpers/h264Source.ts';
import { haveNginx, startNginx } from '../../helpers/nginxRtmp.ts';
import { startObsPublishers } from '../../helpers/obsPublisher.ts';
import { RtmpOutputs } from '../../../media/index.ts';
import { PLAYBACK_ID, STREAM_ID, STREAM_KEY, startMediaServer } from '../harness.ts';

const IDLE_MS = 1500;
const HOLD_MS = 8000;
/** What a loaded machine adds to a timer-driven release (WHIP DELETE, a 1 s check, the poll), ms. */
const SLACK_MS = 3000;

t.test('a stream without publisher or WHEP viewer is held for its HLS players and RTMP pushes, and released when they go or at the limit', { timeout: 180_000 }, async (t) => {
  if (!haveNginx) return t.fail('nginx-light + libnginx-mod-rtmp are not installed (apt-get install -y nginx-light libnginx-mod-rtmp)');
  const rtmp = await startNginx(t);
  const srv = await startMediaServer(t, {
    settings: { idleStreamMs: IDLE_MS, idleHoldMaxMs: HOLD_MS, memoryTrimAfterCloseMs: 200, memoryTrimIntervalMs: 0 },
    outboundPolicy: new AddressPolicy({ allowLoopback: true }),
  });
  const [A, B, C] = [`${STREAM_ID}_a`, `${STREAM_ID}_b`, `${STREAM_ID}_c`];
  const pubs = startObsPublishers(t);
  const source = await stampedH264({ size: 256, frames: 300, gop: 30 });
  const published = await Promise.all([A, B, C].map((id) => pubs.publish({ url: `${srv.baseUrl}/live/${id}/whip`, token: STREAM_KEY, source })));
  t.same(published.map((p) => p.status), [201, 201, 201]);

  // C pushes to nginx-rtmp.
  srv.node.getStream(C)!.readers.find(RtmpOutputs)!.setDestinations([{ name: 'rec', url: `rtmp://127.0.0.1:${rtmp.port}/live/hold`, enabled: true }]);
  await rtmp.notes.waitFor('publish', 1, 30_000);

  // A's player: the LL-HLS playlist every 500 ms (and the newest segment), as hls.js polls a live stream.
  const playlistUrl = `${srv.baseUrl}/hls/${PLAYBACK_ID}_a/plain.m3u8`;
  let playing = true;
  let lastSeq = -1;
  let segmentsFetched = 0;
  const player = (async () => {
    for (let i = 0; i < 400 && playing; i++) {
      const res = await fetch(playlistUrl).catch(() => null);
      if (res?.status === 200) {
        const text = await res.text();
        const seq = Number(/#EXT-X-MEDIA-SEQUENCE:(\d+)/.exec(text)?.[1] ?? -1);
        const uris = text.split('\n').filter((l) => l && !l.startsWith('#'));
        lastSeq = seq + uris.length - 1;
        const newest = uris.at(-1);
        if (newest && (await fetch(new URL(newest, playlistUrl)).catch(() => null))?.status === 200) segmentsFetched++;
      } else await res?.text();
      await new Promise((r) => setTimeout(r, 500)); // the player's poll interval
    }
  })();
  for (let i = 0; i < 200 && lastSeq < 1; i++) await new Promise((r) => setTimeout(r, 100)); // poll interval
  t.ok(lastSeq >= 1, `the HLS player gets segments (${lastSeq})`);

  // Every publisher leaves.
  const leftAt = performance.now();
  await Promise.all(published.map((p) => pubs.stop(p.id)));
  const seqAtLeave = lastSeq;
  const gone: Record<string, number> = {};
  let cSlate = false;
  let aSlate = false;
  let cDisabledAt = 0;
  for (let i = 0; i < 600 && !(A in gone && B in gone && C in gone); i++) {
    const now = performance.now() - leftAt;
    for (const id of [A, B, C]) {
      const s = srv.node.getStream(id);
      if (!(id in gone) && (!s || s.state === 'closed')) gone[id] = now;
    }
    if (!(A in gone) && srv.node.status(A)?.output === 'slate') aSlate = true;
    if (!(C in gone) && srv.node.status(C)?.output === 'slate') cSlate = true;
    // Well past the idle time, C's destination is switched off: nothing consumes it any more.
    if (!cDisabledAt && now > IDLE_MS + 2000 && !(C in gone)) {
      srv.node.getStream(C)!.readers.find(RtmpOutputs)!.setDestinations([{ name: 'rec', url: `rtmp://127.0.0.1:${rtmp.port}/live/hold`, enabled: false }]);
      cDisabledAt = now;
    }
    await new Promise((r) => setTimeout(r, 100)); // poll interval
  }
  playing = false;
  await player;

  t.ok(B in gone && gone[B]! >= IDLE_MS - 100 && gone[B]! <= IDLE_MS + SLACK_MS, `B (no consumer) released after the idle time (${Math.round(gone[B] ?? -1)} ms)`);
  t.ok(cDisabledAt > 0 && C in gone && gone[C]! > cDisabledAt, `C (RTMP push) held past the idle time until its destination went off (off at ${Math.round(cDisabledAt)} ms, released at ${Math.round(gone[C] ?? -1)} ms)`);
  t.ok(C in gone && gone[C]! - cDisabledAt <= SLACK_MS, 'and released within a few checks of it');
  t.ok(cSlate, 'C carried the slate while held');
  t.ok(aSlate, 'A carried the slate while held');
  t.ok(A in gone && gone[A]! >= IDLE_MS + HOLD_MS - 100, `A (HLS player) held up to the hold limit (${Math.round(gone[A] ?? -1)} ms)`);
  t.ok(A in gone && gone[A]! <= IDLE_MS + HOLD_MS + SLACK_MS, 'and released there although its player still polled');
  t.ok(lastSeq >= seqAtLeave + 3, `the HLS player kept getting (slate) segments while the publisher was away (${seqAtLeave} → ${lastSeq}, ${segmentsFetched} fetched)`);
  // Released streams give their freed memory back: a trim followed the closes (timer off here).
  for (const until = performance.now() + 5000; srv.node.memoryTrim.trims === 0 && performance.now() < until; ) await new Promise((r) => setTimeout(r, 50));
  t.ok(srv.node.memoryTrim.trims >= 1 && srv.node.memoryTrim.trims <= 3, `memory trimmed after the releases (${srv.node.memoryTrim.trims} trims for 3 streams)`);
});

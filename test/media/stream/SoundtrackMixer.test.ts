/**
 * SoundtrackMixer and the publisher's audio: a publisher that sends only Opus silence frames (no
 * microphone) gets no decoder (the take alone is the same mix); the first packet that carries sound
 * builds it, and its decoded audio is mixed in from then on.
 */
import pino from 'pino';
import t from 'tap';
import { Soundtrack } from '../../../media/stream/Soundtrack.ts';
import { SoundtrackMixer } from '../../../media/stream/SoundtrackMixer.ts';
import { opusPackets, opusTone } from '../../helpers/opusSource.ts';
import { until } from '../../helpers/until.ts';

/** An Opus RTP packet (PT 111) carrying `payload`. */
function rtp(seq: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(12);
  h[0] = 0x80;
  h[1] = 111;
  h.writeUInt16BE(seq & 0xffff, 2);
  h.writeUInt32BE((seq * 960) >>> 0, 4);
  h.writeUInt32BE(0x1234, 8);
  return Buffer.concat([h, payload]);
}

t.test('a silent publisher costs no decoder; the first sound builds it and is mixed in', { timeout: 30_000 }, async (t) => {
  // A silent take: whatever the mix carries is the publisher's.
  const take = new Soundtrack({ songId: 'sng_x', take: 1, wavKey: 'songs/sng_x/1.wav', startAt: Date.now(), loop: true, gainDb: 0, duckPublisherDb: 0 }, new Int16Array(48_000 * 2));
  let loudest = 0;
  const mixer = new SoundtrackMixer({
    soundtrack: take,
    jitterMs: 60,
    logger: pino({ level: 'silent' }),
    onPcm: (pcm) => {
      for (const v of pcm) loudest = Math.max(loudest, Math.abs(v));
    },
  });
  t.teardown(() => mixer.close());
  mixer.setPublisher(111);
  const silence = Buffer.from([0xf8, 0xff, 0xfe]);
  for (let i = 0; i < 50; i++) mixer.pushOpus(rtp(i, silence));
  t.equal(mixer.decodesPublisher, false, 'silence frames: no decoder');

  const sound = opusPackets(await opusTone());
  let seq = 50;
  // The packets of 2 s, paced as they would come (the mix takes them after its jitter window).
  const timer = setInterval(() => mixer.pushOpus(rtp(seq, sound[seq++ % sound.length] as Buffer)), 20);
  t.teardown(() => clearInterval(timer));
  await until('the publisher is heard in the mix', () => loudest, (v) => v > 1000, 10_000, 50);
  t.equal(mixer.decodesPublisher, true, 'sound: decoded');
  t.ok(loudest > 1000, `the mix carries the publisher (peak ${loudest})`);
});

/**
 * Which publisher Opus packets count as sound (media/webrtc/OpusSilence.ts): RTP packets as a WHIP
 * publisher sends them, with and without CSRCs, a header extension (OBS and browsers send one) and
 * padding. The 3-byte CELT silence frame is what the OBS-like test publisher sends.
 */
import t from 'tap';
import { OPUS_SILENCE_MAX_BYTES, opusCarriesSound, rtpPayloadBytes } from '../../../media/webrtc/OpusSilence.ts';

function rtp(payload: number[], o: { csrcs?: number; extWords?: number; padding?: number } = {}): Uint8Array {
  const head = [0x80 | (o.padding ? 0x20 : 0) | (o.extWords !== undefined ? 0x10 : 0) | (o.csrcs ?? 0), 111, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
  const csrcs = new Array<number>((o.csrcs ?? 0) * 4).fill(7);
  const ext = o.extWords !== undefined ? [0xbe, 0xde, 0, o.extWords, ...new Array<number>(o.extWords * 4).fill(9)] : [];
  const pad = o.padding ? [...new Array<number>(o.padding - 1).fill(0), o.padding] : [];
  return Uint8Array.from([...head, ...csrcs, ...ext, ...payload, ...pad]);
}

const SILENCE = [0xf8, 0xff, 0xfe];
const SOUND = [0xfc, ...new Array<number>(60).fill(0x5a)];

t.test('silence frames and DTX carry no sound; anything longer does', async (t) => {
  t.equal(OPUS_SILENCE_MAX_BYTES, 3);
  t.equal(rtpPayloadBytes(rtp(SILENCE)), 3);
  t.notOk(opusCarriesSound(rtp(SILENCE)), 'the CELT silence frame');
  t.notOk(opusCarriesSound(rtp([0xf8])), 'a TOC byte alone (DTX)');
  t.ok(opusCarriesSound(rtp(SOUND)), 'a 61-byte frame');
  t.ok(opusCarriesSound(rtp([0xf8, 1, 2, 3])), 'four bytes');
});

t.test('the payload is found after CSRCs and a header extension, before padding', async (t) => {
  t.equal(rtpPayloadBytes(rtp(SILENCE, { csrcs: 2, extWords: 2, padding: 4 })), 3);
  t.notOk(opusCarriesSound(rtp(SILENCE, { csrcs: 2, extWords: 2, padding: 4 })), 'silence behind a big header and padding');
  t.ok(opusCarriesSound(rtp(SOUND, { extWords: 1 })), 'sound behind an extension');
});

t.test('malformed packets are not sound', async (t) => {
  t.equal(rtpPayloadBytes(Uint8Array.from([0x80, 111])), -1, 'shorter than a header');
  t.equal(rtpPayloadBytes(Uint8Array.from([0x40, ...new Array<number>(20).fill(0)])), -1, 'not RTP version 2');
  t.equal(rtpPayloadBytes(Uint8Array.from([0x90, 111, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xbe, 0xde, 0, 50, 1, 2, 3, 4])), -1, 'an extension longer than the packet');
  t.notOk(opusCarriesSound(Uint8Array.from([])));
});

/**
 * RFC 7741 depacketization: in-order VP8 RTP packets become whole VP8 frames that end at the
 * marker bit. The payload descriptor (X/N/S/PID, then I/L/T/K and their fields) is parsed and
 * stripped; a frame starts at S=1 with partition id 0. The decoder gets one push per frame.
 *
 * Damaged or hostile input is dropped the same way as H.264's (H264Depacketizer.ts): a sequence
 * gap, a descriptor that overruns the packet, data before a frame start, a frame past `maxBytes`,
 * or a new timestamp before the marker drop the frame being built.
 */
import { MAX_ACCESS_UNIT_BYTES, type DepacketizeResult, type DepacketizedFrame, type RtpIn } from './H264Depacketizer.ts';

/** Bytes of the payload descriptor, or -1 when it overruns the payload. */
export function vp8DescriptorBytes(p: Buffer): number {
  if (p.length < 1) return -1;
  const b0 = p[0] as number;
  let i = 1;
  if (b0 & 0x80) {
    if (p.length < 2) return -1;
    const x = p[i++] as number;
    if (x & 0x80) {
      // I: picture id, 7 or 15 bits (M flag).
      if (i >= p.length) return -1;
      i += (p[i] as number) & 0x80 ? 2 : 1;
    }
    if (x & 0x40) i++; // L: TL0PICIDX
    if (x & 0x30) i++; // T or K: TID/Y/KEYIDX
  }
  return i <= p.length ? i : -1;
}

export class Vp8Depacketizer {
  readonly #maxBytes: number;
  #chunks: Buffer[] = [];
  #bytes = 0;
  #timestamp = -1;
  #nextSeq = -1;
  #broken = false;
  #started = false;
  frames = 0;
  dropped = 0;

  constructor(opts: { maxBytes?: number } = {}) {
    this.#maxBytes = opts.maxBytes ?? MAX_ACCESS_UNIT_BYTES;
  }

  push(p: RtpIn): DepacketizeResult {
    let dropped = false;
    if (this.#timestamp !== p.timestamp && this.#timestamp !== -1) dropped = this.#drop();
    if (this.#nextSeq !== -1 && p.sequenceNumber !== this.#nextSeq) this.#broken = true;
    this.#nextSeq = (p.sequenceNumber + 1) & 0xffff;
    this.#timestamp = p.timestamp;
    const skip = vp8DescriptorBytes(p.payload);
    if (skip < 0) {
      this.#broken = true;
    } else {
      const b0 = p.payload[0] as number;
      const frameStart = (b0 & 0x10) !== 0 && (b0 & 0x07) === 0;
      if (frameStart) {
        if (this.#started) this.#broken = true; // two starts in one timestamp
        this.#started = true;
      } else if (!this.#started) {
        this.#broken = true; // the frame's first packet was lost
      }
      this.#chunks.push(p.payload.subarray(skip));
      this.#bytes += p.payload.length - skip;
      if (this.#bytes > this.#maxBytes) this.#broken = true;
    }
    if (!p.marker) return { frame: null, dropped };
    if (this.#broken || this.#bytes === 0) return { frame: null, dropped: this.#drop() || dropped };
    const data = Buffer.concat(this.#chunks, this.#bytes);
    // RFC 6386 §9.1: bit 0 of the frame tag is the inverted key-frame flag.
    const frame: DepacketizedFrame = { data, keyframe: ((data[0] as number) & 0x01) === 0, timestamp: p.timestamp };
    this.frames++;
    this.#reset();
    return { frame, dropped };
  }

  #drop(): boolean {
    const had = this.#chunks.length > 0 || this.#broken;
    if (had) this.dropped++;
    this.#reset();
    return had;
  }

  #reset(): void {
    this.#chunks = [];
    this.#bytes = 0;
    this.#broken = false;
    this.#started = false;
    this.#timestamp = -1;
  }
}

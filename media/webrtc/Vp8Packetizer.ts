/**
 * RFC 7741 packetization of VP8 frames (the VP8 output branch's, once per frame for every VP8
 * viewer, like H264Packetizer). Each packet starts with the 3-byte payload descriptor
 *
 *   X=1 R N=0 S PID=0 | I=1 L=0 T=0 K=0 | M=1 PictureID(15 bits)
 *
 * S marks the first packet of the frame (partition 0 starts there; we do not split on partition
 * boundaries, which RFC 7741 §4.4 allows). The 15-bit picture id counts frames so a receiver can
 * tell a lost frame from a late packet; the marker bit ends the frame. Timestamps are 90 kHz.
 */
import { RtpHeader, RtpPacket } from 'werift';

/** Bytes of the payload descriptor we write (X, I/L/T/K, 2-byte picture id). */
export const VP8_DESCRIPTOR_BYTES = 4;

export class Vp8Packetizer {
  readonly #ssrc: number;
  readonly #payloadType: number;
  readonly #maxPayload: number;
  #seq: number;
  #pictureId: number;

  /** @param maxPayload bytes of RTP payload per packet, descriptor included. */
  constructor(opts: { ssrc: number; payloadType: number; maxPayload: number }) {
    if (opts.maxPayload <= VP8_DESCRIPTOR_BYTES) throw new RangeError(`maxPayload ${opts.maxPayload} leaves no room for VP8 data`);
    this.#ssrc = opts.ssrc;
    this.#payloadType = opts.payloadType;
    this.#maxPayload = opts.maxPayload;
    this.#seq = Math.floor(Math.random() * 0xffff);
    this.#pictureId = Math.floor(Math.random() * 0x7fff);
  }

  /** Serialized RTP packets for one encoded VP8 frame at RTP time `timestamp` (90 kHz). */
  packetize(frame: Uint8Array, timestamp: number): Buffer[] {
    const chunk = this.#maxPayload - VP8_DESCRIPTOR_BYTES;
    const count = Math.max(1, Math.ceil(frame.length / chunk));
    const packets: Buffer[] = [];
    for (let i = 0; i < count; i++) {
      const body = frame.subarray(i * chunk, Math.min((i + 1) * chunk, frame.length));
      const payload = Buffer.allocUnsafe(VP8_DESCRIPTOR_BYTES + body.length);
      payload[0] = 0x80 | (i === 0 ? 0x10 : 0); // X, S on the first packet, PID 0
      payload[1] = 0x80; // I: picture id present
      payload[2] = 0x80 | (this.#pictureId >> 8); // M: 15-bit picture id
      payload[3] = this.#pictureId & 0xff;
      payload.set(body, VP8_DESCRIPTOR_BYTES);
      const header = new RtpHeader({
        payloadType: this.#payloadType,
        sequenceNumber: this.#seq,
        timestamp: timestamp >>> 0,
        ssrc: this.#ssrc,
        marker: i === count - 1,
      });
      this.#seq = (this.#seq + 1) & 0xffff;
      packets.push(new RtpPacket(header, payload).serialize());
    }
    this.#pictureId = (this.#pictureId + 1) & 0x7fff;
    return packets;
  }
}

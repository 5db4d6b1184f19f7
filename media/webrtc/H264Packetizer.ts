/**
 * RFC 6184 packetization of the encoder's Annex-B access units, packetization-mode=1: a NAL unit that
 * fits goes as a single-NAL packet, a larger one as FU-A fragments; the marker bit ends the access
 * unit. Packets are serialized once per access unit and the same bytes go to every viewer (each
 * viewer's werift sender rewrites SSRC, payload type, sequence and timestamp offsets on its copy).
 */
import { RtpHeader, RtpPacket } from 'werift';
import { NAL_F_NRI_MASK, NAL_FU_A, NAL_TYPE_MASK } from '../H264Nal.ts';

export class H264Packetizer {
  readonly #ssrc: number;
  readonly #payloadType: number;
  readonly #maxPayload: number;
  #seq: number;

  /** @param maxPayload bytes of RTP payload per packet. */
  constructor(opts: { ssrc: number; payloadType: number; maxPayload: number }) {
    this.#ssrc = opts.ssrc;
    this.#payloadType = opts.payloadType;
    this.#maxPayload = opts.maxPayload;
    this.#seq = Math.floor(Math.random() * 0xffff);
  }

  /** Serialized RTP packets for one access unit at RTP time `timestamp` (90 kHz). */
  packetize(nals: readonly Uint8Array[], timestamp: number): Buffer[] {
    const payloads: Buffer[] = [];
    for (const nal of nals) {
      if (nal.length <= this.#maxPayload) {
        payloads.push(Buffer.from(nal.buffer, nal.byteOffset, nal.byteLength));
        continue;
      }
      // FU-A: indicator carries F/NRI of the NAL with type FU-A; header carries S/E and the type.
      const header = nal[0] as number;
      const indicator = (header & NAL_F_NRI_MASK) | NAL_FU_A;
      const type = header & NAL_TYPE_MASK;
      const body = nal.subarray(1);
      const chunk = this.#maxPayload - 2;
      for (let off = 0; off < body.length; off += chunk) {
        const end = Math.min(off + chunk, body.length);
        const fu = Buffer.allocUnsafe(2 + end - off);
        fu[0] = indicator;
        fu[1] = (off === 0 ? 0x80 : 0) | (end === body.length ? 0x40 : 0) | type;
        fu.set(body.subarray(off, end), 2);
        payloads.push(fu);
      }
    }
    return payloads.map((payload, i) => {
      const h = new RtpHeader({
        payloadType: this.#payloadType,
        sequenceNumber: this.#seq,
        timestamp: timestamp >>> 0,
        ssrc: this.#ssrc,
        marker: i === payloads.length - 1,
      });
      this.#seq = (this.#seq + 1) & 0xffff;
      return new RtpPacket(h, payload).serialize();
    });
  }
}

/**
 * RFC 6184 depacketization, packetization-mode 1 (what WHIP publishers send): single NAL unit
 * packets, STAP-A aggregates and FU-A fragments, in sequence order (the session's reorder window
 * runs first), become Annex B access units that end at the marker bit. The decoder gets one push
 * per picture instead of one per packet.
 *
 * Hostile or damaged input never reaches the decoder half-built: a sequence gap, a fragment
 * without its start, an aggregate whose sizes overrun the packet, a NAL type mode 1 does not
 * allow, an access unit that grows past `maxBytes`, or a new timestamp before the marker all drop
 * the access unit being built (`dropped` counts them, and `push` says so, so the session can ask
 * for a key frame).
 */
import { NAL_F_NRI_MASK, NAL_FU_A, NAL_IDR, NAL_STAP_A, NAL_TYPE_MASK, nalType } from '../H264Nal.ts';

const START_CODE = Buffer.from([0, 0, 0, 1]);

/** Default bound of one access unit, bytes (a 1080p intra frame at 20 Mb/s is ≈ 0.5 MB). */
export const MAX_ACCESS_UNIT_BYTES = 4 * 1024 * 1024;

export interface DepacketizedFrame {
  /** The access unit (H.264 Annex B) or frame (VP8). */
  data: Buffer;
  keyframe: boolean;
  /** RTP timestamp of its packets. */
  timestamp: number;
}

/** What a depacketizer returns for each packet. */
export interface DepacketizeResult {
  /** The frame this packet completed, if it did. */
  frame: DepacketizedFrame | null;
  /** True when a frame was dropped as damaged on this packet (ask the sender for a key frame). */
  dropped: boolean;
}

/** The parts of an RTP packet a depacketizer reads. */
export interface RtpIn {
  sequenceNumber: number;
  timestamp: number;
  marker: boolean;
  payload: Buffer;
}

export class H264Depacketizer {
  readonly #maxBytes: number;
  #chunks: Buffer[] = [];
  #bytes = 0;
  #timestamp = -1;
  #nextSeq = -1;
  #broken = false;
  #keyframe = false;
  /** FU-A fragments of the NAL unit being rebuilt (its header byte first). */
  #fu: Buffer[] | null = null;
  /** Access units handed out. */
  frames = 0;
  /** Access units dropped as damaged. */
  dropped = 0;

  constructor(opts: { maxBytes?: number } = {}) {
    this.#maxBytes = opts.maxBytes ?? MAX_ACCESS_UNIT_BYTES;
  }

  push(p: RtpIn): DepacketizeResult {
    let dropped = false;
    if (this.#timestamp !== p.timestamp && this.#timestamp !== -1) {
      // A new picture before the last one's marker: the marker packet was lost.
      dropped = this.#drop();
    }
    if (this.#nextSeq !== -1 && p.sequenceNumber !== this.#nextSeq) this.#broken = true;
    this.#nextSeq = (p.sequenceNumber + 1) & 0xffff;
    this.#timestamp = p.timestamp;
    this.#take(p.payload);
    if (this.#bytes > this.#maxBytes) this.#broken = true;
    if (!p.marker) return { frame: null, dropped };
    if (this.#broken || this.#chunks.length === 0 || this.#fu) return { frame: null, dropped: this.#drop() || dropped };
    const frame: DepacketizedFrame = { data: Buffer.concat(this.#chunks, this.#bytes), keyframe: this.#keyframe, timestamp: p.timestamp };
    this.frames++;
    this.#reset();
    return { frame, dropped };
  }

  #take(payload: Buffer): void {
    if (payload.length < 1) {
      this.#broken = true;
      return;
    }
    const type = nalType(payload);
    // RFC 6184 §5.2: 1–23 is a single NAL unit packet (the type is the NAL's own).
    if (type >= 1 && type <= 23) {
      this.#nal(payload);
    } else if (type === NAL_STAP_A) {
      // [indicator][size16][NAL][size16][NAL]…: every size must fit what is left.
      let i = 1;
      while (i < payload.length) {
        if (i + 2 > payload.length) return void (this.#broken = true);
        const size = payload.readUInt16BE(i);
        i += 2;
        if (size === 0 || i + size > payload.length) return void (this.#broken = true);
        this.#nal(payload.subarray(i, i + size));
        i += size;
      }
    } else if (type === NAL_FU_A) {
      if (payload.length < 3) return void (this.#broken = true);
      const fuHeader = payload[1] as number;
      const start = (fuHeader & 0x80) !== 0;
      const end = (fuHeader & 0x40) !== 0;
      if (start) {
        if (this.#fu) this.#broken = true; // the previous fragmented NAL never ended
        this.#fu = [Buffer.from([((payload[0] as number) & NAL_F_NRI_MASK) | (fuHeader & NAL_TYPE_MASK)])];
      } else if (!this.#fu) {
        return void (this.#broken = true); // its start was lost
      }
      this.#fu.push(payload.subarray(2));
      this.#bytes += payload.length - 2;
      if (end) {
        const nal = Buffer.concat(this.#fu);
        this.#fu = null;
        this.#bytes -= nal.length - 1; // #nal counts the whole NAL again
        this.#nal(nal);
      }
    } else {
      // 0, 30, 31 are reserved; STAP-B, MTAP and FU-B belong to interleaved mode, which we never offer.
      this.#broken = true;
    }
  }

  #nal(nal: Buffer): void {
    if (nalType(nal) === NAL_IDR) this.#keyframe = true;
    this.#chunks.push(START_CODE, nal);
    this.#bytes += START_CODE.length + nal.length;
  }

  /** Drops the access unit being built; true when there was one. */
  #drop(): boolean {
    const had = this.#chunks.length > 0 || this.#fu !== null || this.#broken;
    if (had) this.dropped++;
    this.#reset();
    return had;
  }

  #reset(): void {
    this.#chunks = [];
    this.#bytes = 0;
    this.#fu = null;
    this.#broken = false;
    this.#keyframe = false;
    this.#timestamp = -1;
  }
}

/**
 * One unbroken RTP sequence for an output whose packets come from several sources in turn: the
 * viewers' audio is the publisher's Opus passed through, then the soundtrack's mix (our encoder),
 * then the publisher's again, or the next publisher's, all under one SSRC. Each source numbers its
 * packets from its own random start; a receiver's SRTP replay check (libsrtp's window: 128 packets)
 * drops every packet whose number lies behind the last one it took, so after a switch to a source
 * whose numbers happened to lie behind, a WHEP viewer heard nothing until they caught up (half the
 * switches, at random; seen in Chromium when a soundtrack started). Here each source's numbers are
 * moved to follow the last one sent, keeping the source's own steps (losses, reordering).
 */
import { rtpDelta, seqAfter } from './RtpArrival.ts';

/** A sequence step outside [−MAX_BACK, MAX_AHEAD] is another source: reordering reaches a few packets back, losses rarely a thousand ahead. */
const MAX_BACK = 100;
const MAX_AHEAD = 1000;
/** An RTP time step beyond this many ticks either way is another source too (2 s of 48 kHz: any Opus packet is ≤ 120 ms). */
const MAX_TIME_STEP = 96_000;

export class RtpSequence {
  /** Added to a source's numbers (mod 2^16). */
  #offset = 0;
  /** The newest packet of the current source: its number and RTP time; null before the first. */
  #last: { seq: number; ts: number } | null = null;
  /** The newest number sent. */
  #lastOut = 0;

  /** The number one RTP packet (at least a header) goes out under, continuing the output's. */
  next(rtp: Buffer): number {
    const seq = rtp.readUInt16BE(2);
    const ts = rtp.readUInt32BE(4);
    const last = this.#last;
    const step = last ? seqAfter(last.seq, seq) : 0;
    if (last === null || step < -MAX_BACK || step > MAX_AHEAD || Math.abs(rtpDelta(ts, last.ts)) > MAX_TIME_STEP) {
      // A new source (or the first): its packet follows the last one out.
      this.#offset = (this.#lastOut + (last === null ? 0 : 1) - seq) & 0xffff;
      this.#last = { seq, ts };
    } else if (step > 0) this.#last = { seq, ts };
    const out = (seq + this.#offset) & 0xffff;
    if (last === null || seqAfter(this.#lastOut, out) > 0) this.#lastOut = out;
    return out;
  }
}

/**
 * Which rendition one WHEP viewer's link carries (docs/decisions/0031-renditions.md), from what its
 * RTCP says: Chromium's receive-side estimate (REMB) and the fraction of our packets it lost
 * (receiver reports).
 *
 * - Down: at once when a report says ≥ 10 % lost or the estimate falls below 65 % of what we send
 *   it (a link overrun: libwebrtc reports ≈ 85 % of what arrives, and what arrives is capped by the
 *   link; waiting a second more fills the link's queue, and the losses and retransmissions that
 *   follow froze a viewer for most of 20 s in the lab); after 2 s when it stays below 80 % (a link
 *   a little short). On a link that jitters, the estimate dips to ≈ 75 % and comes back within a
 *   second: no reason to move (moving at 80 % at once put viewers of a 1 %-loss, ± 10 ms link on the
 *   half rendition). It goes to the best rendition the estimate carries (the lowest when none does).
 * - Up: only on evidence. The receiver's estimate grows with what arrives (≤ 1.5× of it), so a
 *   viewer on a small rendition is never estimated able to take the full one from its own media.
 *   After `probeAfterMs` without loss it is sent probes on top of its media, ramping with the
 *   estimate (never above 1.25× of it, never past the next rendition up × 1.1): a link with room
 *   lets the estimate follow it until it reaches the next rendition's rate, and the viewer moves
 *   up; a link without room shows queueing (the estimate falls), and the probe stops, to
 *   start again after twice the wait (up to 32 s).
 */

export interface Rung {
  /** '' for the full encode; else a rendition's name. */
  name: string;
  /** What it needs on the wire, bit/s (video at its target, audio and RTP framing). */
  bps: number;
}

export interface ViewerBandwidthStatus {
  rendition: string;
  /** The viewer's latest estimate (REMB), bit/s; null before one came. */
  estimateBps: number | null;
  /** Fraction lost in its latest receiver report (0–1); null before one came. */
  fractionLost: number | null;
  /** Probe packets sent on top of the media now, bit/s (0: not probing). */
  probeBps: number;
  /** Moves between renditions since the viewer joined. */
  switches: number;
}

/** An estimate older than this is not acted on, ms (Chromium sends REMB every ≈ 200 ms–1 s). */
const ESTIMATE_FRESH_MS = 3000;
const LOSS_DOWN = 0.1;
/** Under this share of what it is sent, the estimate moves the viewer down at once. */
const OVERRUN = 0.65;
/** Under this share for SQUEEZE_MS, it moves the viewer down. */
const SQUEEZE = 0.8;
const SQUEEZE_MS = 2000;
const FIRST_PROBE_AFTER_MS = 4000;
const MAX_PROBE_AFTER_MS = 32_000;

export class ViewerBandwidth {
  readonly #ladder: readonly Rung[];
  #rung = 0;
  #estimate: number | null = null;
  #estimateAt = -Infinity;
  #fractionLost: number | null = null;
  #probeAfterMs = FIRST_PROBE_AFTER_MS;
  /** When the viewer last moved down or a probe failed: probes wait `probeAfterMs` from here. */
  #quietSince: number;
  #probeBps = 0;
  #switches = 0;
  /** Since when every estimate was under SQUEEZE of what was sent (null: the last was not). */
  #squeezedSince: number | null = null;

  /** `ladder`: best first (the full encode), at least one rung. */
  constructor(ladder: readonly Rung[], now = performance.now()) {
    this.#ladder = ladder;
    this.#quietSince = now;
  }

  /** The rendition the viewer should get ('' = the full encode). */
  get rendition(): string {
    return this.#ladder[this.#rung]?.name ?? '';
  }

  /** Probe bytes to send on top of the media now, bit/s. */
  get probeBps(): number {
    return this.#probeBps;
  }

  /**
   * One RTCP packet's news. `sentBps`: what the viewer was sent over the last second (media,
   * retransmissions and probes). Returns whether the rendition changed.
   */
  update(fb: { fractionLost?: number; rembBps?: number }, sentBps: number, now = performance.now()): boolean {
    const before = this.#rung;
    if (fb.rembBps !== undefined) {
      this.#estimate = fb.rembBps;
      this.#estimateAt = now;
    }
    // While probing, receiver reports are not read for loss: on a link that reorders, Chromium's
    // reports count our padding as lost (66 % "loss" during a 100 kb/s probe). The estimate shows
    // whether the probe overran the link.
    const lost = this.#probeBps > 0 ? undefined : fb.fractionLost;
    if (fb.fractionLost !== undefined) this.#fractionLost = fb.fractionLost;
    const fresh = now - this.#estimateAt <= ESTIMATE_FRESH_MS ? this.#estimate : null;
    const lossy = lost !== undefined && lost >= LOSS_DOWN;
    const squeezed = fresh !== null && fb.rembBps !== undefined && sentBps > 0 && fresh < SQUEEZE * sentBps;
    if (fb.rembBps !== undefined) this.#squeezedSince = squeezed ? (this.#squeezedSince ?? now) : null;
    const overrun = squeezed && fresh !== null && fresh < OVERRUN * sentBps;
    const short = this.#squeezedSince !== null && now - this.#squeezedSince >= SQUEEZE_MS;
    // A probe stops as a move down starts: an overrun at once, a squeeze that lasts 2 s (a jittery
    // link's dips, which come back within a second, would end every probe on it).
    if (this.#probeBps > 0 && (overrun || short)) {
      // The link had no room for the probe: it stops, and the next waits twice as long.
      this.#probeBps = 0;
      this.#probeAfterMs = Math.min(MAX_PROBE_AFTER_MS, this.#probeAfterMs * 2);
      this.#quietSince = now;
      return false;
    }
    if (lossy || ((overrun || short) && fresh !== null && fresh < (this.#ladder[this.#rung]?.bps ?? 0))) {
      // Down to the best rung the estimate carries (with loss and no estimate: one rung).
      let to = Math.min(this.#ladder.length - 1, this.#rung + 1);
      if (fresh !== null) while (to < this.#ladder.length - 1 && (this.#ladder[to]?.bps ?? 0) > fresh) to++;
      if (to > this.#rung) {
        this.#rung = to;
        this.#quietSince = now;
        this.#probeBps = 0;
        this.#squeezedSince = null;
      }
    } else if (this.#rung > 0 && fresh !== null) {
      const up = this.#ladder[this.#rung - 1] as Rung;
      const here = this.#ladder[this.#rung] as Rung;
      if (fresh >= up.bps) {
        this.#rung--;
        this.#probeBps = 0;
        this.#probeAfterMs = FIRST_PROBE_AFTER_MS;
        this.#quietSince = now;
      } else if (now - this.#quietSince >= this.#probeAfterMs) {
        // Probes up to 1.25× the estimate (what the receiver's estimator may grow to), never past the next rung.
        this.#probeBps = Math.max(0, Math.min(up.bps * 1.1, fresh * 1.25) - here.bps);
      }
    }
    if (this.#rung !== before) this.#switches++;
    return this.#rung !== before;
  }

  status(): ViewerBandwidthStatus {
    return { rendition: this.rendition, estimateBps: this.#estimate, fractionLost: this.#fractionLost, probeBps: Math.round(this.#probeBps), switches: this.#switches };
  }
}

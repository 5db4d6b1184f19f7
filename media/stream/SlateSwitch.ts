/**
 * Switches a stream's outputs between live frames and the slate (decision 0011). A tick at
 * `slateFps` checks the gap since the last live frame: after `slateAfterMs` with someone watching,
 * the outputs carry the slate (built once per episode, see Slate.ts) until the next live frame.
 *
 * It runs only while something consumes the outputs (connected WHEP viewers, HLS players of the
 * last 30 s, RTMP pushes), so an unwatched stream encodes nothing, and offers that never complete
 * ICE/DTLS cost no encode. It never touches the processor: slate frames go straight to the encoders.
 */
import type { Logger } from 'pino';
import type { Frame } from './FrameProcessor.ts';
import type { MediaSettings } from '../settings.ts';
import { Slate, type SlateSource } from './Slate.ts';
import type { SlateImage } from './SlateImage.ts';

/** What the outputs carry while no live frame comes (decision 0011). */
export interface SlateStatus {
  /** The outputs carry the slate now (no live frame for slateAfterMs while someone watches). */
  active: boolean;
  /** ms epoch the current slate began; null while live. */
  since: number | null;
  /** What the current (or last) slate shows; null before any. */
  source: SlateSource | null;
  /** Slate frames encoded since the stream was made. */
  framesOut: number;
}

export interface SlateSwitchOptions {
  streamId: string;
  settings: MediaSettings;
  /** Something consumes the outputs now. */
  watched: () => boolean;
  /** A frame is inside a working processor (slow, not stalled, for up to slateBusyMs). */
  processing: () => boolean;
  /** The size slate frames are built at now, px (read at every tick: a new size rebuilds the frame). */
  size: () => { width: number; height: number };
  /** One slate frame for the encoders; returns the PTS the H.264 encoder gave it (-1: refused). */
  push: (frame: Frame) => number;
  /** The stream's own slate image, shown instead of the greyed last frame while it decodes. */
  image?: SlateImage;
  logger: Logger;
}

export class SlateSwitch {
  readonly #opts: SlateSwitchOptions;
  readonly #settings: MediaSettings;
  readonly #slate = new Slate();
  readonly #timer: NodeJS.Timeout;
  /** The outputs are on the slate (set at its first frame, cleared by the next live frame). */
  #active = false;
  #since: number | null = null;
  #source: SlateSource | null = null;
  #frame: Frame | null = null;
  #framesOut = 0;
  /** PTS of slate frames pushed whose access units have not come out yet, in push order (rising). */
  readonly #pendingPts = new Set<number>();
  /** performance.now() of the last live frame pushed to the encoder. */
  #lastLiveOutMs = -Infinity;
  #closed = false;

  constructor(opts: SlateSwitchOptions) {
    this.#opts = opts;
    this.#settings = opts.settings;
    if (opts.image) this.#slate.useImage(opts.image);
    this.#timer = setInterval(() => this.#tick(), Math.max(20, Math.round(1000 / opts.settings.slateFps)));
  }

  /** The outputs carry the slate now. */
  get active(): boolean {
    return this.#active;
  }

  #tick(): void {
    if (this.#closed) return;
    const now = performance.now();
    const gap = now - this.#lastLiveOutMs;
    // A frame inside a working processor is slow, not stalled (a model at a few fps must not flicker).
    const processing = this.#opts.processing() && gap < this.#settings.slateBusyMs;
    if (!this.#opts.watched() || gap < this.#settings.slateAfterMs || processing) {
      if (this.#active && gap < this.#settings.slateAfterMs) this.#end();
      return;
    }
    const { width, height } = this.#opts.size();
    // A slate image that appeared, changed or went since the frame was built makes it stale; so
    // does a new size (the one a publisher's first frames will have, see LiveStream#slateSize).
    const resized = this.#frame !== null && (this.#frame.width !== width || this.#frame.height !== height);
    if (!this.#active || !this.#frame || resized || this.#slate.stale(width, height)) {
      const { frame, source } = this.#slate.build(width, height);
      this.#frame = frame;
      this.#source = source;
      this.#active = true;
      this.#since = Date.now();
      this.#opts.logger.info(`slateTick() | outputs on slate [streamId:${this.#opts.streamId}] [source:${source}] [size:${width}x${height}]`);
    }
    const pts = this.#opts.push(this.#frame);
    if (pts >= 0) this.#pendingPts.add(pts);
  }

  #end(): void {
    if (!this.#active) return;
    this.#active = false;
    this.#frame = null;
    this.#since = null;
    this.#opts.logger.info(`endSlate() | outputs live again [streamId:${this.#opts.streamId}]`);
  }

  /** A live frame goes to the encoders at `now` (performance.now()): the slate ends and keeps it as the last frame. */
  live(frame: Frame, now: number): void {
    this.#lastLiveOutMs = now;
    this.#end();
    this.#slate.keep(frame, now);
  }

  /**
   * The access unit of the frame pushed with `pts` came out of the encoder: true when that frame
   * was a slate frame (counted as one). Decided by the frame itself, not by whether the slate is
   * on now: the one or two frames inside the encoder at a switch belong to the side that pushed them.
   */
  accessUnitOut(pts: number): boolean {
    let slate = false;
    // PTS rise in push order: a slate frame older than this one was dropped by the encoder's input.
    for (const p of this.#pendingPts) {
      if (p > pts) break;
      this.#pendingPts.delete(p);
      slate ||= p === pts;
    }
    if (slate) this.#framesOut++;
    return slate;
  }

  /** What the outputs carry now: `none` when no encoder runs (or its last live frame is older than slateAfterMs). */
  output(encoding: boolean): 'live' | 'slate' | 'none' {
    if (this.#active) return 'slate';
    return encoding && performance.now() - this.#lastLiveOutMs < this.#settings.slateAfterMs ? 'live' : 'none';
  }

  status(): SlateStatus {
    return { active: this.#active, since: this.#since, source: this.#source, framesOut: this.#framesOut };
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    this.#pendingPts.clear();
    this.#slate.clear();
  }
}

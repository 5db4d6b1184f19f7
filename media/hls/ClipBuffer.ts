/**
 * The last minute of a stream's output, kept so a client can clip it (`POST …/clips`): the
 * complete fMP4 segments the HLS packager already produced from the stream's one encode (no
 * second encode, no decode). Segments start on keyframes, so a clip is cut at key frames with
 * one segment's granularity (≈ 1 s by default): at least what was asked, up to a segment more,
 * ending with the newest complete segment. Its
 * length is media time, so a stall or a publisher's reconnect inside it is a gap (the player
 * holds the last frame), as it was live.
 *
 * Bounded twice: by media time (`maxMs`, default 62 s: a 60 s clip plus a segment of slack) and
 * by bytes (`maxBytes`, default 24 MiB ≈ 60 s at 3 Mbit/s, twice our default bitrate), dropping
 * the oldest segment first. A clip never spans an init change (an SPS change): it stops at the
 * newest segment whose init differs, and so may be shorter than asked.
 */
import type { CompletedSegment } from './HlsPackager.ts';

export interface ClipBufferOptions {
  /** Media time kept, ms. Default 62 000. */
  maxMs?: number;
  /** Bytes kept (segment bytes; the shared init segments are not counted). Default 24 MiB. */
  maxBytes?: number;
}

/** What a clip is made of: one init segment and the segments that follow it, oldest first. */
export interface ClipSource {
  init: Buffer;
  segments: CompletedSegment[];
  /** Media time from the first frame to the end of the last, ms (gaps included). */
  durationMs: number;
  /** ms epoch of the first frame. */
  startedAtMs: number;
}

export const CLIP_MAX_SECONDS = 60;

export class ClipBuffer {
  readonly #maxMs: number;
  readonly #maxBytes: number;
  readonly #segments: CompletedSegment[] = [];
  #ms = 0;
  #bytes = 0;

  constructor(opts: ClipBufferOptions = {}) {
    this.#maxMs = opts.maxMs ?? (CLIP_MAX_SECONDS + 2) * 1000;
    this.#maxBytes = opts.maxBytes ?? 24 * 1024 * 1024;
  }

  push(segment: CompletedSegment): void {
    this.#segments.push(segment);
    this.#ms += segment.durationMs;
    this.#bytes += segment.bytes.length;
    while (this.#segments.length > 1 && (this.#ms > this.#maxMs || this.#bytes > this.#maxBytes)) {
      const gone = this.#segments.shift() as CompletedSegment;
      this.#ms -= gone.durationMs;
      this.#bytes -= gone.bytes.length;
    }
  }

  /** Media time held, ms. */
  get heldMs(): number {
    return this.#ms;
  }

  get heldBytes(): number {
    return this.#bytes;
  }

  /**
   * The newest segments covering at least `seconds` — the moment a client clips is never cut
   * off, so a clip is up to one segment longer than asked — or fewer when less is held or an
   * init change comes first; null when nothing is held.
   */
  take(seconds: number): ClipSource | null {
    const newest = this.#segments.at(-1);
    if (!newest) return null;
    const wantMs = seconds * 1000;
    const picked: CompletedSegment[] = [];
    let spanMs = 0;
    for (let i = this.#segments.length - 1; i >= 0 && spanMs < wantMs; i--) {
      const seg = this.#segments[i] as CompletedSegment;
      if (seg.initId !== newest.initId) break;
      picked.unshift(seg);
      // Media time: the packager cuts stalls and reconnects out of its timeline, as players see it.
      spanMs += seg.durationMs;
    }
    const first = picked[0] as CompletedSegment;
    return { init: newest.init, segments: picked, durationMs: spanMs, startedAtMs: first.wallStartMs };
  }

  clear(): void {
    this.#segments.length = 0;
    this.#ms = 0;
    this.#bytes = 0;
  }
}

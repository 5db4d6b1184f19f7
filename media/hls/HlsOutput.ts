/**
 * A stream's LL-HLS output as a reader of its hub: the packager, the clip buffer it feeds, and the
 * recording it feeds while recording is on; one packager more per rendition, and the multivariant
 * playlist that offers them all (a player picks the one its link carries).
 *
 *   H.264 AUs + AAC ─► HlsPackager (LL-HLS, fMP4 parts) ─segments─┬► ClipBuffer (last minute, clips)
 *                                                                  └► RecordingWriter (while recording)
 *   rendition AUs + AAC ─► HlsPackager per rendition (same segment boundaries: same key frames and times)
 *
 * It takes AAC while players asked for something in the last 30 s, or while recording (a
 * recording keeps the publisher's sound); otherwise its parts carry silence.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { EncodedAccessUnit } from '../gst/EncoderBin.ts';
import type { MediaSettings } from '../settings.ts';
import type { ReaderContext, ReaderStatus, StreamReader } from '../StreamReader.ts';
import { ClipBuffer, type ClipSource } from './ClipBuffer.ts';
import { HlsPackager, type CompletedSegment } from './HlsPackager.ts';
import { RecordingWriter } from './RecordingWriter.ts';

export interface HlsOutputOptions {
  settings: MediaSettings;
  /** Folder of this stream's recordings; without it recording is refused. */
  recordingsDir?: string;
  logger: Logger;
}

export class HlsOutput implements StreamReader {
  readonly name = 'hls';
  readonly #ctx: ReaderContext;
  readonly #opts: HlsOutputOptions;
  readonly #logger: Logger;
  readonly packager: HlsPackager;
  /** One packager per rendition, by name, in the order the settings list them. */
  readonly variants = new Map<string, HlsPackager>();
  /** The last minute of output segments, for clips. */
  readonly #clips = new ClipBuffer();
  /** Recording asked for (`record: true`); the writer starts with the next output segment. */
  #record = false;
  #recorder: RecordingWriter | null = null;
  /** The last recording's end (its queued segments written, its meta marked complete). */
  #recordingEnded: Promise<void> = Promise.resolve();
  /** Whether AAC frames come now (new packagers start with it). */
  #aacRunning = false;
  /** The variants take rendition access units (players were here in the last 30 s). */
  #variantsOn = false;

  constructor(ctx: ReaderContext, opts: HlsOutputOptions) {
    this.#ctx = ctx;
    this.#opts = opts;
    this.#logger = opts.logger;
    this.packager = this.#packager((segment) => this.#onSegment(segment));
    this.#freshVariants();
  }

  #packager(onSegment?: (segment: CompletedSegment) => void, leader?: HlsPackager): HlsPackager {
    const s = this.#opts.settings;
    const p = new HlsPackager({
      partTargetMs: s.hlsPartTargetMs,
      ...(s.hlsPartHoldBackMs !== null ? { partHoldBackMs: s.hlsPartHoldBackMs } : {}),
      segmentTargetMs: s.hlsSegmentTargetMs,
      windowSegments: s.hlsWindowSegments,
      partSegments: 3,
      nominalFrameMs: 1000 / s.outputFps,
      logger: this.#logger,
      // Renditions take the stream encoder's key frames, so the full packager's requests serve
      // every variant; a variant asking too, a few ms after it, was deferred by the encoder's
      // rate limit into a second key frame half a segment later (segments of 0.5 s).
      requestKeyUnit: leader ? () => undefined : () => this.#ctx.requestKeyUnit(),
      // The first request after an idle spell: the AAC encoder (and the renditions) start for it.
      onDemand: () => this.#ctx.changed(),
      ...(onSegment ? { onSegment } : {}),
      ...(leader ? { leader } : {}),
    });
    p.audioExpected = this.#aacRunning;
    return p;
  }

  /** New, empty packagers for the renditions: they join the full one's timeline at its next segment. */
  #freshVariants(): void {
    for (const p of this.variants.values()) p.close();
    this.variants.clear();
    for (const spec of this.#opts.settings.renditions) this.variants.set(spec.name, this.#packager(undefined, this.packager));
  }

  #all(): HlsPackager[] {
    return [this.packager, ...this.variants.values()];
  }

  /** An LL-HLS player requested something (of any variant) in the last 30 s. */
  get watched(): boolean {
    return this.#all().some((p) => p.watched);
  }

  get wantsAac(): boolean {
    return this.watched || this.#record;
  }

  /**
   * The renditions run while an LL-HLS player was here in the last 30 s (the multivariant playlist
   * counts): an unwatched stream spends nothing on them. Their packagers join the full one's
   * timeline at its next segment start, so a player's first multivariant playlist waits one to two
   * segments for them (the route waits for a whole segment of each).
   */
  get wantsRenditions(): boolean {
    return this.variants.size > 0 && this.watched;
  }

  video(au: EncodedAccessUnit, slate: boolean): void {
    this.packager.pushVideo(au, slate);
    const on = this.wantsRenditions;
    // Players gone: the renditions stop, and what the variants held goes with them; the next
    // player gets new ones that join again (a variant fed again after a pause would run on its own
    // sequence numbers, not the full one's).
    if (this.#variantsOn && !on) this.#freshVariants();
    this.#variantsOn = on;
  }

  rendition(name: string, au: EncodedAccessUnit, slate: boolean): void {
    // Renditions may run for another reader (a WHEP viewer on one) while no player is here.
    if (this.#variantsOn) this.variants.get(name)?.pushVideo(au, slate);
  }

  aac(frame: Uint8Array, atMs: number): void {
    for (const p of this.#all()) p.pushAudio(frame, atMs);
  }

  aacRunning(running: boolean): void {
    this.#aacRunning = running;
    for (const p of this.#all()) p.audioExpected = running;
  }

  /** Unwatched, the open segment ends now (clips get it) and the next publisher starts after a discontinuity. */
  publisherLeft(watched: boolean): void {
    if (watched) return;
    for (const p of this.#all()) if (!p.closed) p.flush();
  }

  /**
   * The multivariant playlist (rfc8216bis §4.4.6): the full encode (`index.m3u8`) first, then each
   * rendition with media (`{name}/index.m3u8`). BANDWIDTH is the peak segment bit rate held, or
   * before a whole segment the configured rates with a fifth more for the framing. A rendition is
   * listed once it has media (the route waits for a whole segment of each).
   */
  multivariant(): string {
    const s = this.#opts.settings;
    const lines = ['#EXTM3U', '#EXT-X-VERSION:9', '#EXT-X-INDEPENDENT-SEGMENTS'];
    const add = (p: HlsPackager, videoKbps: number, uri: string) => {
      const v = p.variant();
      if (!v) return;
      const configured = Math.round((videoKbps * 1000 + s.aacBitrateBps) * 1.2);
      const peak = v.peakBps ?? configured;
      const average = v.averageBps !== null ? `,AVERAGE-BANDWIDTH=${v.averageBps}` : '';
      lines.push(`#EXT-X-STREAM-INF:BANDWIDTH=${peak}${average},RESOLUTION=${v.width}x${v.height},CODECS="${v.codecs}",FRAME-RATE=${s.outputFps.toFixed(3)}`, uri);
    };
    add(this.packager, s.videoBitrateKbps, 'index.m3u8');
    for (const spec of s.renditions) {
      const p = this.variants.get(spec.name);
      if (p) add(p, spec.bitrateKbps, `${spec.name}/index.m3u8`);
    }
    return `${lines.join('\n')}\n`;
  }

  /** The newest `seconds` of output (whole segments, cut at keyframes), or null when none is held. */
  clip(seconds: number): ClipSource | null {
    return this.#clips.take(seconds);
  }

  #onSegment(segment: CompletedSegment): void {
    this.#clips.push(segment);
    if (!this.#record || !this.#opts.recordingsDir) return;
    // A recording starts with the publisher's frames, not the slate shown before them.
    if (!this.#recorder && segment.liveBytes === 0) return;
    if (!this.#recorder) {
      const id = `rec_${randomBytes(9).toString('base64url')}`;
      this.#recorder = new RecordingWriter({ dir: join(this.#opts.recordingsDir, id), id, streamId: this.#ctx.streamId, logger: this.#logger });
      this.#logger.info(`onSegment() | recording started [streamId:${this.#ctx.streamId}] [recordingId:${id}]`);
    }
    this.#recorder.push(segment);
  }

  /**
   * Turns recording of the output on or off. On: a recording starts with the next complete output
   * segment and goes on across publisher reconnects (each a discontinuity) until it is turned off
   * or the stream closes. False without a recordings folder.
   */
  setRecording(on: boolean): boolean {
    if (on && !this.#opts.recordingsDir) return false;
    if (on === this.#record) return true;
    this.#record = on;
    if (!on) this.#endRecording();
    this.#ctx.changed();
    return true;
  }

  /** The recording being written, if any (tests wait on its `flushed()`). */
  get recorder(): RecordingWriter | null {
    return this.#recorder;
  }

  /** Resolves when the last recording ended is fully on disk. */
  recordingEnded(): Promise<void> {
    return this.#recordingEnded;
  }

  #endRecording(): void {
    const r = this.#recorder;
    this.#recorder = null;
    if (!r) return;
    this.#recordingEnded = r.close().catch((err: unknown) => this.#logger.error({ err }, `endRecording() | close failed [streamId:${this.#ctx.streamId}]`));
  }

  status(): ReaderStatus {
    const watched = this.watched;
    return { kind: 'hls', watched, consumers: (watched ? 1 : 0) + (this.#recorder ? 1 : 0) };
  }

  /** The recording ends after the packager's close flushed its last segment into it. */
  close(): Promise<void> {
    try {
      for (const p of this.#all()) p.close();
    } finally {
      this.#clips.clear();
      this.#endRecording();
    }
    return this.#recordingEnded;
  }
}

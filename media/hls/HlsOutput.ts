/**
 * A stream's LL-HLS output as a reader of its hub: the packager, the clip buffer it feeds, and the
 * recording it feeds while recording is on.
 *
 *   H.264 AUs + AAC ─► HlsPackager (LL-HLS, fMP4 parts) ─segments─┬► ClipBuffer (last minute, clips)
 *                                                                  └► RecordingWriter (while recording)
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
  /** The last minute of output segments, for clips. */
  readonly #clips = new ClipBuffer();
  /** Recording asked for (`record: true`); the writer starts with the next output segment. */
  #record = false;
  #recorder: RecordingWriter | null = null;
  /** The last recording's end (its queued segments written, its meta marked complete). */
  #recordingEnded: Promise<void> = Promise.resolve();

  constructor(ctx: ReaderContext, opts: HlsOutputOptions) {
    this.#ctx = ctx;
    this.#opts = opts;
    this.#logger = opts.logger;
    const s = opts.settings;
    this.packager = new HlsPackager({
      partTargetMs: s.hlsPartTargetMs,
      ...(s.hlsPartHoldBackMs !== null ? { partHoldBackMs: s.hlsPartHoldBackMs } : {}),
      segmentTargetMs: s.hlsSegmentTargetMs,
      windowSegments: s.hlsWindowSegments,
      partSegments: 3,
      nominalFrameMs: 1000 / s.outputFps,
      logger: opts.logger,
      requestKeyUnit: () => ctx.requestKeyUnit(),
      // The first request after an idle spell: the AAC encoder starts for it.
      onDemand: () => ctx.changed(),
      onSegment: (segment) => this.#onSegment(segment),
    });
  }

  /** An LL-HLS player requested something in the last 30 s. */
  get watched(): boolean {
    return this.packager.watched;
  }

  get wantsAac(): boolean {
    return this.packager.watched || this.#record;
  }

  video(au: EncodedAccessUnit, slate: boolean): void {
    this.packager.pushVideo(au, slate);
  }

  aac(frame: Uint8Array, atMs: number): void {
    this.packager.pushAudio(frame, atMs);
  }

  aacRunning(running: boolean): void {
    this.packager.audioExpected = running;
  }

  /** Unwatched, the open segment ends now (clips get it) and the next publisher starts after a discontinuity. */
  publisherLeft(watched: boolean): void {
    if (!watched && !this.packager.closed) this.packager.flush();
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
    return { kind: 'hls', watched: this.packager.watched, consumers: (this.packager.watched ? 1 : 0) + (this.#recorder ? 1 : 0) };
  }

  /** The recording ends after the packager's close flushed its last segment into it. */
  close(): Promise<void> {
    try {
      this.packager.close();
    } finally {
      this.#clips.clear();
      this.#endRecording();
    }
    return this.#recordingEnded;
  }
}

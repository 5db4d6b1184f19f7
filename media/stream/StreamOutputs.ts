/**
 * A stream's outputs beside its WHEP viewers: the LL-HLS packager, the clip buffer it feeds, the
 * recording it feeds, the RTMP pushes, and the AAC encoder those share.
 *
 *   H.264 AUs ─┬► HlsPackager (LL-HLS, fMP4 parts) ─segments─┬► ClipBuffer (last minute, clips)
 *              │                                             └► RecordingWriter (while recording)
 *              └► RtmpOutputs (FLV → ffmpeg → each destination)
 *   Opus RTP ─► AacEncoderBin ─AAC─► HlsPackager, RtmpOutputs
 *   with a soundtrack: Opus RTP ─► SoundtrackMixer (take + publisher) ─PCM─┬► AacEncoderBin ─AAC─► the same
 *                                                                           └► OpusEncoderBin ─Opus RTP─► WHEP viewers
 *
 * They take the same access units the WHEP viewers get (no second encoder). The AAC encoder runs
 * once per publisher session, and only while something consumes it.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { AacEncoderBin } from '../gst/AacEncoderBin.ts';
import { ClipBuffer, type ClipSource } from '../hls/ClipBuffer.ts';
import type { EncodedAccessUnit } from '../gst/EncoderBin.ts';
import { EncoderInputClock } from './EncoderInputClock.ts';
import { HlsPackager, type CompletedSegment, type HlsPackagerStats } from '../hls/HlsPackager.ts';
import { RecordingWriter, type RecordingWriterStats } from '../hls/RecordingWriter.ts';
import type { RtmpPushStatus } from '../rtmp/RtmpPush.ts';
import { RtmpOutputs, type RtmpDestination, type RtmpDestinationStatus } from '../rtmp/RtmpOutputs.ts';
import type { OutboundPolicy } from '../rtmp/RtmpRelay.ts';
import { opusCarriesSound } from '../webrtc/OpusSilence.ts';
import type { MediaSettings } from '../settings.ts';
import type { Soundtrack, SoundtrackStatus } from './Soundtrack.ts';
import { SoundtrackMixer } from './SoundtrackMixer.ts';
import { OpusEncoderBin } from '../gst/OpusEncoderBin.ts';

/** Samples per channel in one AAC-LC frame. */
const AAC_FRAME_SAMPLES = 1024;

/** The name of the spec's own RTMP destination (output_rtmp_url) among a stream's destinations. */
export const PRIMARY_RTMP = 'output_rtmp_url';

export interface StreamOutputsStatus {
  /** LL-HLS output (null when hlsEnabled is off). */
  hls: HlsPackagerStats | null;
  /** RTMP push to output_rtmp_url (null when the stream has none or no publisher). */
  rtmp: RtmpPushStatus | null;
  /** Every RTMP destination (output_rtmp_url first, named so), with its push state. */
  rtmpOutputs: RtmpDestinationStatus[];
  /** The recording being written (null when recording is off, or on with no output yet). */
  recording: RecordingWriterStats | null;
  /** The soundtrack set on the stream (null: none), where it is on the node's clock. */
  soundtrack: SoundtrackStatus | null;
}

export interface StreamOutputsOptions {
  streamId: string;
  settings: MediaSettings;
  /** Address rules for the RTMP push's connections. */
  outboundPolicy?: OutboundPolicy;
  /** Folder of this stream's recordings; without it recording is refused. */
  recordingsDir?: string;
  /** Asks the H.264 encoder for a key unit (a new segment or push starts on one). */
  requestKeyUnit: () => void;
  /** The publisher's Opus payload type; undefined without a publisher (or without its audio). */
  audioPayloadType: () => number | undefined;
  /** WHEP viewers that take audio: with a soundtrack they get the mix (encoded to Opus here) instead of the publisher's Opus. */
  audioViewers: () => number;
  /** One Opus RTP packet of the mix for every WHEP viewer. */
  sendViewerAudio: (rtp: Buffer) => void;
  /** An output failed in a way the stream reports (its lastError). */
  onError: (message: string) => void;
  logger: Logger;
}

export class StreamOutputs {
  readonly #opts: StreamOutputsOptions;
  readonly #logger: Logger;
  readonly #streamId: string;
  readonly #hls: HlsPackager | null;
  /** The last minute of output segments, for clips (fed by the HLS packager). */
  readonly #clips = new ClipBuffer();
  #aac: AacEncoderBin | null = null;
  /** With a soundtrack: when the AAC encoder's input samples were due (the mix's clock). */
  #aacClock: EncoderInputClock | null = null;
  /** The song mixed into the output audio (null: the publisher's audio alone, as it comes). */
  #soundtrack: Soundtrack | null = null;
  /** Runs while a soundtrack is set and an output takes audio: the AAC encoder and the viewers' Opus encoder then take its PCM. */
  #mixer: SoundtrackMixer | null = null;
  /** The mix as Opus RTP for WHEP viewers (only while viewers with audio exist). */
  #opus: OpusEncoderBin | null = null;
  /** The publisher has sent an Opus packet that carries sound (before it, only silence frames or none). */
  #audioHeard = false;
  readonly #rtmp: RtmpOutputs;
  /** The spec's output_rtmp_url and the stream's other destinations, as last set. */
  #rtmpUrl: string | undefined;
  #rtmpExtra: RtmpDestination[] = [];
  /** Recording asked for (`record: true`); the writer starts with the next output segment. */
  #record = false;
  #recorder: RecordingWriter | null = null;
  /** The last recording's end (its queued segments written, its meta marked complete). */
  #recordingEnded: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(opts: StreamOutputsOptions) {
    this.#opts = opts;
    this.#logger = opts.logger;
    this.#streamId = opts.streamId;
    const s = opts.settings;
    this.#hls = s.hlsEnabled
      ? new HlsPackager({
          partTargetMs: s.hlsPartTargetMs,
          ...(s.hlsPartHoldBackMs !== null ? { partHoldBackMs: s.hlsPartHoldBackMs } : {}),
          segmentTargetMs: s.hlsSegmentTargetMs,
          windowSegments: s.hlsWindowSegments,
          partSegments: 3,
          nominalFrameMs: 1000 / s.outputFps,
          logger: opts.logger,
          requestKeyUnit: opts.requestKeyUnit,
          onDemand: () => this.syncAac(),
          onSegment: (segment) => this.#onSegment(segment),
        })
      : null;
    this.#rtmp = new RtmpOutputs({
      ...(opts.outboundPolicy ? { policy: opts.outboundPolicy } : {}),
      ffmpegPath: s.ffmpegPath,
      logger: opts.logger,
      requestKeyUnit: opts.requestKeyUnit,
    });
  }

  /** The LL-HLS packager (null when HLS is off). */
  get hls(): HlsPackager | null {
    return this.#hls;
  }

  /** Something consumes these outputs now: HLS players of the last 30 s, or a running RTMP push. */
  get watched(): boolean {
    return (this.#hls?.watched ?? false) || this.#rtmp.active;
  }

  /** The newest `seconds` of output, or null when none is held (see LiveStream.clip). */
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
      this.#recorder = new RecordingWriter({ dir: join(this.#opts.recordingsDir, id), id, streamId: this.#streamId, logger: this.#logger });
      this.#logger.info(`onSegment() | recording started [streamId:${this.#streamId}] [recordingId:${id}]`);
    }
    this.#recorder.push(segment);
  }

  /** See LiveStream.setRecording: false when HLS packaging or the recordings folder is missing. */
  setRecording(on: boolean): boolean {
    if (on && (!this.#hls || !this.#opts.recordingsDir)) return false;
    if (on === this.#record) return true;
    this.#record = on;
    if (!on) this.#endRecording();
    this.syncAac();
    return true;
  }

  /** The recording being written, if any. */
  get recorder(): RecordingWriter | null {
    return this.#recorder;
  }

  #endRecording(): void {
    const r = this.#recorder;
    this.#recorder = null;
    if (!r) return;
    this.#recordingEnded = r.close().catch((err: unknown) => this.#logger.error({ err }, `endRecording() | close failed [streamId:${this.#streamId}]`));
  }

  /** Resolves when the last recording ended is fully on disk. */
  recordingEnded(): Promise<void> {
    return this.#recordingEnded;
  }

  /** Sets (or clears) output_rtmp_url. */
  setRtmpOutput(url: string | undefined): void {
    if (url === this.#rtmpUrl) return;
    this.#rtmpUrl = url;
    this.#applyRtmp();
  }

  /** Sets the stream's other RTMP destinations (each enabled or not). */
  setRtmpDestinations(dests: readonly RtmpDestination[]): void {
    this.#rtmpExtra = dests.filter((d) => d.name !== PRIMARY_RTMP).map((d) => ({ ...d }));
    this.#applyRtmp();
  }

  #applyRtmp(): void {
    this.#rtmp.set([...(this.#rtmpUrl ? [{ name: PRIMARY_RTMP, url: this.#rtmpUrl, enabled: true }] : []), ...this.#rtmpExtra]);
    this.syncAac();
  }

  /** A publisher attached: RTMP pushes to the stream's enabled destinations, and the AAC encoder if needed. */
  start(): void {
    this.#rtmp.start();
    this.syncAac();
  }

  /**
   * Runs the AAC encoder only while something consumes it: an RTMP push, a recording, or HLS
   * players (a request in the last 30 s). It costs ≈ 1–2 % of a core, so
   * streams nobody watches over HLS don't pay for it; HLS parts carry silence until it runs.
   */
  syncAac(): void {
    const audio = this.#opts.audioPayloadType();
    // A recording keeps the publisher's sound, so it runs the AAC encoder too.
    const wanted = !this.#closed && (this.#rtmp.active || (this.#hls?.watched ?? false) || this.#record);
    if (this.#soundtrack) {
      this.#syncMix(wanted, audio);
      return;
    }
    // Silence frames alone start no encoder (media/webrtc/OpusSilence.ts): the outputs fill silence anyway.
    const sound = this.#audioHeard || this.#opts.settings.aacForSilence;
    if (audio === undefined || !wanted || !sound) {
      this.closeAac();
      return;
    }
    if (this.#aac) return;
    try {
      this.#aac = new AacEncoderBin({
        payloadType: audio,
        bitrateBps: this.#opts.settings.aacBitrateBps,
        logger: this.#logger,
        onFrame: (frame, atMs) => {
          this.#hls?.pushAudio(frame, atMs);
          this.#rtmp.pushAudio(frame, atMs);
        },
      });
    } catch (err) {
      // Outputs go on video-only (silence-padded) rather than failing the stream.
      this.#opts.onError(`aac: ${String(err)}`);
      this.#logger.error({ err }, `syncAac() | AAC encoder failed [streamId:${this.#streamId}]`);
    }
    if (this.#hls) this.#hls.audioExpected = this.#aac !== null;
  }

  /**
   * With a soundtrack the mix runs while an output takes audio, whether or not the publisher sends
   * any (the take alone then): the AAC encoder while HLS, a recording or RTMP consumes it, the
   * Opus encoder while WHEP viewers with audio are there.
   */
  #syncMix(aacWanted: boolean, audio: number | undefined): void {
    const soundtrack = this.#soundtrack as Soundtrack;
    const viewers = !this.#closed && this.#opts.audioViewers() > 0;
    if (!aacWanted && !viewers) {
      this.#closeMix();
      return;
    }
    try {
      this.#mixer ??= new SoundtrackMixer({
        soundtrack,
        jitterMs: this.#opts.settings.soundtrackJitterMs,
        logger: this.#logger,
        onPcm: (pcm, first) => {
          const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
          if (this.#aac && !this.#aac.closed) {
            this.#aacClock?.fed(first, pcm.length / 2);
            this.#aac.push(bytes);
          }
          if (this.#opus && !this.#opus.closed) this.#opus.push(bytes);
        },
      });
      const mixer = this.#mixer;
      if (aacWanted && !this.#aac) {
        // AAC frame n holds the encoder's input samples from n·1024 on (it neither drops nor adds
        // any): it is placed at their due time, so a busy event loop delays frames without moving
        // them, and a stretch the mix skipped after a long stall moves the frames after it on.
        const clock = new EncoderInputClock((frame) => mixer.dueMs(frame));
        this.#aacClock = clock;
        let n = 0;
        this.#aac = new AacEncoderBin({
          payloadType: 'pcm',
          bitrateBps: this.#opts.settings.aacBitrateBps,
          logger: this.#logger,
          onFrame: (frame) => {
            const atMs = clock.dueAt(AAC_FRAME_SAMPLES * n++);
            this.#hls?.pushAudio(frame, atMs);
            this.#rtmp.pushAudio(frame, atMs);
          },
        });
      } else if (!aacWanted && this.#aac) {
        this.#aac.close();
        this.#aac = null;
      }
      if (viewers && !this.#opus) {
        this.#opus = new OpusEncoderBin({ payloadType: 111, bitrateBps: 96_000, mtu: this.#opts.settings.rtpMaxPayload, logger: this.#logger, onRtp: this.#opts.sendViewerAudio });
      } else if (!viewers && this.#opus) {
        this.#opus.close();
        this.#opus = null;
      }
    } catch (err) {
      this.#opts.onError(`soundtrack: ${String(err)}`);
      this.#logger.error({ err }, `syncMix() | soundtrack encoder failed [streamId:${this.#streamId}]`);
      this.#closeMix();
    }
    this.#mixer?.setPublisher(audio);
    if (this.#hls) this.#hls.audioExpected = this.#aac !== null;
  }

  /** Whether WHEP viewers get the mix now (then not the publisher's Opus). */
  get mixesViewerAudio(): boolean {
    return this.#opus !== null;
  }

  #closeMix(): void {
    this.#mixer?.close();
    this.#mixer = null;
    this.#opus?.close();
    this.#opus = null;
    this.closeAac();
  }

  /**
   * Sets (or clears, null) the song mixed into the output audio. The encoder running now goes:
   * the next one takes the mix (or the publisher's Opus again) from the next sync on.
   */
  setSoundtrack(soundtrack: Soundtrack | null): void {
    if (this.#closed) return;
    this.#closeMix();
    this.#soundtrack = soundtrack;
    this.syncAac();
  }

  /** The publisher's audio ends (it left, or another one takes over): its AAC encoder goes, and the next must be heard again. */
  endPublisherAudio(): void {
    this.#audioHeard = false;
    // A soundtrack goes on alone, without a gap.
    if (this.#mixer) this.#mixer.setPublisher(undefined);
    else this.closeAac();
  }

  /** The AAC encoder belongs to one publisher's audio (or to the soundtrack's mix): it goes with it (the outputs fill silence). */
  closeAac(): void {
    this.#aac?.close();
    this.#aac = null;
    if (this.#hls) this.#hls.audioExpected = false;
  }

  /** The publisher's Opus, for the AAC encoder or the soundtrack's mix (when it runs). */
  pushAudioRtp(rtp: Buffer): void {
    if (this.#mixer) {
      this.#mixer.pushOpus(rtp);
      return;
    }
    if (!this.#audioHeard && opusCarriesSound(rtp)) {
      this.#audioHeard = true;
      this.syncAac();
    }
    this.#aac?.push(rtp);
  }

  /** One H.264 access unit for HLS and the RTMP pushes; `slate`: the slate's, not the publisher's (recordings leave it out). */
  pushVideo(au: EncodedAccessUnit, slate: boolean): void {
    this.#hls?.pushVideo(au, slate);
    this.#rtmp.pushVideo(au);
  }

  /** Ends the open HLS segment now (clips get it); the next publisher starts after a discontinuity. */
  endSegment(): void {
    if (this.#hls && !this.#hls.closed) this.#hls.flush();
  }

  status(): StreamOutputsStatus {
    return {
      hls: this.#hls?.stats() ?? null,
      rtmp: this.#rtmp.pushStatus(PRIMARY_RTMP),
      rtmpOutputs: this.#rtmp.status(),
      recording: this.#recorder?.stats ?? null,
      soundtrack: this.#soundtrack?.status() ?? null,
    };
  }

  /** Stops every output; the recording ends after the packager's close flushed its last segment into it. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const steps: (() => void)[] = [
      () => this.#closeMix(),
      () => this.#rtmp.stop(),
      () => this.#hls?.close(),
      () => this.#clips.clear(),
      () => this.#endRecording(),
    ];
    for (const step of steps) {
      try {
        step();
      } catch (err) {
        this.#logger.warn({ err }, `close() | output cleanup step failed [streamId:${this.#streamId}]`);
      }
    }
  }
}

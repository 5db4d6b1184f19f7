/**
 * One live stream on this node: at most one publisher (WhipSession), any number of viewers, and
 * the objects between them, each in its own file. LiveStream wires them and owns the lifecycle
 * (state, started/live/ended, the idle timer, close).
 *
 *   WhipSession ─frame─► VideoIngest ─► FrameSlot (processor) ─┬► EncoderBin (x264) ─AU─┬► ViewerSet (H.264 viewers)
 *                          (decoder)    or passthrough ────────┤                        └► StreamOutputs (HLS, clips, recording, RTMP)
 *                                                              └► Vp8Branch ─────────────► ViewerSet (VP8 viewers)
 *   WhipSession ─Opus RTP─► ViewerSet (every viewer), StreamOutputs (AAC for HLS and RTMP; mixed with the soundtrack, if set)
 *   SlateSwitch ─slate frame─► both encoders while no live frame comes and someone watches
 *   ParamsLandings: scheduled params applied by capture time (CaptureClock), reported per frame
 *   AudioMappings: params that follow the audio (publisher's Opus decoded, or the soundtrack), set per frame by capture time
 *   OutputClock: every frame to the encoders stamped on one timeline (live: capture time; slate: node clock)
 *
 * Encode once per codec: HLS and RTMP take the same access units the WHEP viewers get; the VP8
 * branch runs only while VP8 viewers exist. A slow processor lowers fps but never adds latency
 * (the one-frame slot keeps the newest frame).
 *
 * Viewers may join before the publisher: they are answered at once and start on the first
 * keyframe once video flows (docs/obs.md, "Before the publisher is live").
 */
import type { OutboundPolicy } from '../rtmp/RtmpRelay.ts';
import { AudioMappings } from './AudioMappings.ts';
import type { Logger } from 'pino';
import { EncoderBin, type EncodedAccessUnit } from '../gst/EncoderBin.ts';
import { InvalidStateError } from '../errors.ts';
import type { UpdatePlan } from '../../native/params/index.ts';
import { type Frame, type FrameProcessorFactory, type PixelFormat, type LiveParams } from './FrameProcessor.ts';
import { FrameSlot } from './FrameSlot.ts';
import { NAL_AUD, nalType } from '../H264Nal.ts';
import { OPUS_ENCODER_DELAY_MS } from '../gst/OpusEncoderBin.ts';
import { OutputClock } from './OutputClock.ts';
import { ParamsLandings } from './ParamsLandings.ts';
import type { LiveStreamEvents, LiveStreamState, LiveStreamStatus } from './LiveStreamStatus.ts';
import type { ParamsMark, ScheduledParams } from './ParamsSchedule.ts';
import { VideoIngest } from './VideoIngest.ts';
import type { ClipSource } from '../hls/ClipBuffer.ts';
import type { HlsPackager } from '../hls/HlsPackager.ts';
import type { RecordingWriter } from '../hls/RecordingWriter.ts';
import type { TransportOptions } from '../webrtc/PeerTransport.ts';
import type { PreparedOffer, VideoCodec } from '../webrtc/Sdp.ts';
import type { MediaSettings } from '../settings.ts';
import type { RtmpDestination } from '../rtmp/RtmpOutputs.ts';
import { SlateImage } from './SlateImage.ts';
import type { ImageDecoder } from '../../images/index.ts';
import { SlateSwitch } from './SlateSwitch.ts';
import { Soundtrack, type SoundtrackSpec } from './Soundtrack.ts';
import { StreamOutputs } from './StreamOutputs.ts';
import { RateMeter, StageTimer, type StageTotals } from './StageTimer.ts';
import { TypedEmitter } from '../TypedEmitter.ts';
import { Vp8Branch } from './Vp8Branch.ts';
import type { Vp8EncoderBin } from '../gst/Vp8EncoderBin.ts';
import type { WhepSession } from '../webrtc/WhepSession.ts';
import { OUTPUT_PT, ViewerSet } from '../webrtc/ViewerSet.ts';
import { WhipSession, type SessionCloseReason } from '../webrtc/WhipSession.ts';

export type { EndedInfo, LiveInfo, LiveStreamEvents, LiveStreamState, LiveStreamStatus, StartedInfo } from './LiveStreamStatus.ts';

export interface LiveStreamOptions {
  streamId: string;
  params: LiveParams;
  settings: MediaSettings;
  transport: TransportOptions;
  createProcessor: FrameProcessorFactory;
  /** Address rules for the RTMP push's connections. */
  outboundPolicy?: OutboundPolicy;
  /** Folder of this stream's recordings (`recordings/<streamId>` in the blob store); without it recording is refused. */
  recordingsDir?: string;
  /** The stream's slate picture (`slates/<streamId>/image.png` in the blob store, normalised by the API), shown by the slate when present. */
  slateImagePath?: string;
  /** Decodes the slate picture (the process's bounded decoder); needed with slateImagePath. */
  images?: ImageDecoder;
  /**
   * Asked at every slate tick with whether someone watches: the slate runs only when it answers
   * true (the node bounds the slate encodes of streams that never had a publisher). Default: watched.
   */
  slateAllowed?: (watched: boolean) => boolean;
  logger: Logger;
}

const DEFAULT_SIZE = 512;

/** The params the processor takes: all but audio_mappings, which the node applies itself. */
function engineParams(params: LiveParams): LiveParams {
  if (params.audio_mappings === undefined) return params;
  const { audio_mappings: _mappings, ...rest } = params;
  return rest;
}

export class LiveStream extends TypedEmitter<LiveStreamEvents> {
  readonly streamId: string;
  readonly #opts: LiveStreamOptions;
  readonly #logger: Logger;
  readonly #settings: MediaSettings;
  #params: LiveParams;
  #state: LiveStreamState = 'idle';
  #publisher: WhipSession | null = null;
  /** A publisher attached at least once (a stream viewers made while waiting has had none). */
  #everPublished = false;
  /** The publisher's frames decoded, with their capture times. */
  readonly #ingest: VideoIngest;
  #encoder: EncoderBin | null = null;
  /** The VP8 output: its encoder exists only while VP8 viewers do (and frames flow). */
  readonly #vp8: Vp8Branch;
  /** WHEP viewers, their SSRCs, output clock and H.264 packetization. */
  readonly #viewers: ViewerSet;
  /** The frame processor and the one-frame slot in front of it. */
  readonly #slot: FrameSlot;
  /**
   * Version (ms epoch of the store write, see updateParams) of the newest params applied; 0 until
   * a versioned update arrives. Older updates are stale and ignored.
   */
  #paramsStoredAt = 0;
  /** Scheduled params changes and the frames they land on. */
  readonly #landings: ParamsLandings;
  #startedAt: number | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #idleTimer: NodeJS.Timeout | undefined;
  #statsTimer: NodeJS.Timeout;
  #lastErrorText: string | undefined;
  #lastErrorAt: number | null = null;
  #paramsUpdatedAt: number | null = null;
  /** The stream's last error; setting it stamps its time (the node owns both, status reads them). */
  get #lastError(): string | undefined {
    return this.#lastErrorText;
  }
  set #lastError(message: string | undefined) {
    this.#lastErrorText = message;
    this.#lastErrorAt = message === undefined ? null : Date.now();
  }
  readonly #outRate = new RateMeter();
  readonly #encodeT = new StageTimer();
  readonly #nodeT = new StageTimer();
  /** decodedAt of the frame most recently pushed to the encoder (for node-internal latency). */
  #lastPushedDecodedAtMs = 0;
  /** HLS (and the clips and recording it feeds), RTMP pushes and their AAC encoder. */
  readonly #outputs: StreamOutputs;
  /** Live frames or the slate on the outputs (decision 0011). */
  readonly #slate: SlateSwitch;
  /** A live frame reached the encoder since the publisher attached (gates `started`). */
  #livePushed = false;
  /** The output timeline every frame to the encoders is stamped on (live and slate, across publishers). */
  readonly #clock: OutputClock;
  /** The soundtrack asked for last (null: none); a newer ask wins over a take still loading. */
  #soundtrackSpec: SoundtrackSpec | null = null;
  /** The soundtrack the outputs play (the last asked for once its take was read). */
  #soundtrackPlaying: SoundtrackSpec | null = null;
  #soundtrackAsks = 0;
  /** The soundtrack the outputs play (its take's PCM: what soundtrack mappings read). */
  #soundtrack: Soundtrack | null = null;
  /** Params that follow the stream's audio (the `audio_mappings` param). */
  readonly #audio: AudioMappings;

  constructor(opts: LiveStreamOptions) {
    super(opts.logger);
    this.streamId = opts.streamId;
    this.#opts = opts;
    this.#logger = opts.logger;
    this.#settings = opts.settings;
    this.#params = { ...opts.params };
    this.#clock = new OutputClock(1000 / opts.settings.outputFps);
    this.#viewers = new ViewerSet({ streamId: this.streamId, settings: opts.settings, transport: opts.transport, logger: opts.logger });
    this.#vp8 = new Vp8Branch({
      streamId: this.streamId,
      settings: opts.settings,
      ssrc: this.#viewers.ssrcs.vp8,
      payloadType: OUTPUT_PT,
      // Same 90 kHz clock as the H.264 output, so audio/video sync is the same for both codecs.
      rtpTimestamp: (ptsMs) => this.#viewers.rtpTimestamp(ptsMs),
      viewers: () => this.#viewers.count('VP8'),
      onPackets: (packets, keyframe) => this.#viewers.fanOut('VP8', packets, keyframe),
      onError: (message) => (this.#lastError = message),
      logger: opts.logger,
    });
    this.#outputs = new StreamOutputs({
      streamId: this.streamId,
      settings: opts.settings,
      ...(opts.outboundPolicy ? { outboundPolicy: opts.outboundPolicy } : {}),
      ...(opts.recordingsDir ? { recordingsDir: opts.recordingsDir } : {}),
      requestKeyUnit: () => this.#encoder?.requestKeyUnit(),
      audioPayloadType: () => this.#publisher?.audioPayloadType,
      audioViewers: () => this.#viewers.audioViewers(),
      sendViewerAudio: (rtp) => this.#viewers.sendAudio(rtp, OPUS_ENCODER_DELAY_MS),
      onError: (message) => (this.#lastError = message),
      logger: opts.logger,
    });
    this.#statsTimer = setInterval(() => {
      void this.#publisher?.refreshStats().catch(() => undefined);
      this.#outputs.syncAac();
    }, 2000);
    this.#ingest = new VideoIngest({
      streamId: this.streamId,
      settings: opts.settings,
      size: () => ({ width: this.#width, height: this.#height }),
      format: () => this.#decodeFormat(),
      onFrame: (frame, decodedAtMs, decodeMs, capturedAt) => this.#onDecoded(frame, decodedAtMs, decodeMs, capturedAt),
      onError: (message) => (this.#lastError = message),
      logger: opts.logger,
    });
    this.#audio = new AudioMappings({ streamId: this.streamId, waitMs: opts.settings.audioMappingWaitMs, soundtrack: () => this.#soundtrack, logger: opts.logger });
    this.#audio.set(this.#params.audio_mappings ?? []);
    this.#landings = new ParamsLandings({
      streamId: this.streamId,
      params: () => this.#params,
      apply: (patch) => this.#applyParams(patch),
      publishing: () => this.#publisher !== null,
      landed: (landing) => this.safeEmit('landed', landing),
      onError: (message) => (this.#lastError = message),
      logger: opts.logger,
    });
    this.#slot = new FrameSlot({
      streamId: this.streamId,
      createProcessor: opts.createProcessor,
      // The engine never sees audio_mappings: the node applies them (AudioMappings).
      params: () => engineParams(this.#params),
      placeAt: (capturedAt, ptsMs) => this.#shownAt(capturedAt, ptsMs),
      wait: (at) => this.#audio.waitFor(at),
      before: (at) => this.#beforeFrame(at),
      noOutput: (marks) => this.#landings.noOutput(marks),
      output: (frame, inputAtMs, marks, ptsMs, capturedAt) => this.#encode(frame, inputAtMs, marks, ptsMs, capturedAt),
      onError: (message) => (this.#lastError = message),
      logger: opts.logger,
    });
    this.#slate = new SlateSwitch({
      streamId: this.streamId,
      settings: opts.settings,
      watched: () => {
        const watched = this.#viewers.connected() > 0 || this.#outputs.watched;
        return opts.slateAllowed ? opts.slateAllowed(watched) : watched;
      },
      processing: () => this.#slot.processing,
      size: () => this.#slateSize(),
      // Slate frames are stamped by the node, continuing the live timeline.
      push: (frame) => this.#pushToEncoders(frame, this.#clock.slate(performance.now())),
      ...(opts.slateImagePath && opts.images ? { image: new SlateImage({ path: opts.slateImagePath, logger: opts.logger, images: opts.images }) } : {}),
      logger: opts.logger,
    });
    this.#armIdle();
  }

  get state(): LiveStreamState {
    return this.#state;
  }

  get params(): LiveParams {
    return this.#params;
  }

  get viewerCount(): number {
    return this.#viewers.size;
  }

  /** Viewers that completed ICE and DTLS: what maxViewersPerStream and the node's maxViewersPerNode count. */
  get connectedViewerCount(): number {
    return this.#viewers.connected();
  }

  /** An LL-HLS player requested something in the last 30 s, or an RTMP push runs (the node holds the stream for them). */
  get outputConsumed(): boolean {
    return this.#state !== 'closed' && this.#outputs.watched;
  }

  get publisher(): WhipSession | null {
    return this.#publisher;
  }

  /** A publisher attached at least once; false for a stream made by viewers waiting for it. */
  get everPublished(): boolean {
    return this.#everPublished;
  }

  /** The LL-HLS packager (null when HLS is off). */
  get hls(): HlsPackager | null {
    return this.#outputs.hls;
  }

  /**
   * The newest `seconds` of output (whole segments, cut at keyframes), or null when none is held
   * (no output yet, or HLS off: the clip buffer is fed by the HLS packager).
   */
  clip(seconds: number): ClipSource | null {
    return this.#outputs.clip(seconds);
  }

  /**
   * Turns recording of the output on or off. On: a recording starts with the next complete output
   * segment and goes on across publisher reconnects (each a discontinuity) until it is turned
   * off or the stream closes. Needs HLS packaging (the segments) and a recordings folder; false
   * when either is missing.
   */
  setRecording(on: boolean): boolean {
    this.#assertOpen();
    return this.#outputs.setRecording(on);
  }

  /** The recording being written, if any (tests wait on its `flushed()`). */
  get recorder(): RecordingWriter | null {
    return this.#outputs.recorder;
  }

  /** Resolves when the last recording ended is fully on disk (a clean shutdown waits for it). */
  recordingEnded(): Promise<void> {
    return this.#outputs.recordingEnded();
  }

  /**
   * Sets (or clears) the RTMP push target. The push runs while a publisher is attached: it starts
   * now if one is, else with the next publisher, and stops when the publisher leaves.
   */
  setRtmpOutput(url: string | undefined): void {
    this.#assertOpen();
    this.#outputs.setRtmpOutput(url);
  }

  /** Sets the stream's other RTMP destinations (each enabled or not); same lifecycle as output_rtmp_url. */
  setRtmpDestinations(dests: readonly RtmpDestination[]): void {
    this.#assertOpen();
    this.#outputs.setRtmpDestinations(dests);
  }

  /**
   * Sets (null: clears) the song mixed into the output audio; `load` reads the take's PCM. The
   * same spec again changes nothing (a publisher's grant repeats what the stream holds). Resolves
   * once the take plays (or was superseded by a newer call); rejects when the take cannot be read.
   */
  async setSoundtrack(spec: SoundtrackSpec | null, load: (spec: SoundtrackSpec) => Promise<Int16Array>): Promise<void> {
    this.#assertOpen();
    if (JSON.stringify(spec) === JSON.stringify(this.#soundtrackSpec)) return;
    const ask = ++this.#soundtrackAsks;
    this.#soundtrackSpec = spec;
    if (!spec) {
      this.#soundtrackPlaying = null;
      this.#soundtrack = null;
      this.#outputs.setSoundtrack(null);
      return;
    }
    let soundtrack: Soundtrack;
    try {
      soundtrack = new Soundtrack(spec, await load(spec));
    } catch (err) {
      // What plays goes on; the next ask is compared with it (a DELETE then clears it).
      if (ask === this.#soundtrackAsks) this.#soundtrackSpec = this.#soundtrackPlaying;
      this.#lastError = `soundtrack: ${String(err)}`;
      throw err;
    }
    if (ask !== this.#soundtrackAsks || this.#state === 'closed') return;
    this.#soundtrackPlaying = spec;
    this.#soundtrack = soundtrack;
    this.#outputs.setSoundtrack(soundtrack);
    this.#logger.info(`setSoundtrack() | playing [streamId:${this.streamId}] [songId:${spec.songId}] [take:${spec.take}] [loop:${spec.loop}]`);
  }

  /**
   * Resolves once the frame processor being built exists (frames that need it are dropped until
   * then); at once when none is being built.
   */
  ready(): Promise<void> {
    return this.#slot.ready();
  }

  /**
   * The size slate frames are built at, px. While a publisher's first frame is awaited: the size
   * its frames will have (the stream's params), so the encoder is rebuilt for it under the still
   * slate and not when motion starts (a rebuild there held the first live frame back by its close,
   * its build and its first key frame: ≈ 30 ms idle, up to 350 ms on a loaded machine). Otherwise
   * the running encoder's size (the slate of a publisher that left needs no new encoder).
   */
  #slateSize(): { width: number; height: number } {
    if (this.#publisher && !this.#livePushed) return { width: this.#width, height: this.#height };
    return { width: this.#encoder?.width ?? this.#width, height: this.#encoder?.height ?? this.#height };
  }

  /** True when the current params leave every frame unchanged: no processor, I420 end to end. */
  #passthrough(): boolean {
    return this.#opts.createProcessor.passthrough?.(this.#params) ?? false;
  }

  #decodeFormat(): PixelFormat {
    return this.#passthrough() ? 'I420' : 'RGB';
  }

  get #width(): number {
    return this.#params.width ?? DEFAULT_SIZE;
  }

  get #height(): number {
    return this.#params.height ?? DEFAULT_SIZE;
  }

  #assertOpen(): void {
    if (this.#state === 'closed') throw new InvalidStateError(`stream closed [streamId:${this.streamId}]`);
  }

  /**
   * Attaches a publisher (replacing the current one, which ends with reason `replaced`) and
   * returns it with its non-trickle answer.
   */
  async attachPublisher(offer: PreparedOffer, sessionId: string): Promise<{ session: WhipSession; answer: string }> {
    this.#assertOpen();
    if (this.#publisher) this.#publisher.close('replaced');
    const session = new WhipSession({
      id: sessionId,
      streamId: this.streamId,
      offer,
      transport: this.#opts.transport,
      settings: this.#settings,
      logger: this.#logger,
      onVideoFrame: (frame) => {
        if (session === this.#publisher && this.#state !== 'closed') this.#ingest.push(session, frame);
      },
      onAudioRtp: (rtp) => {
        // With a soundtrack the viewers get the mix (StreamOutputs encodes it), not this.
        if (!this.#outputs.mixesViewerAudio) this.#viewers.sendAudio(rtp);
        if (session === this.#publisher) {
          this.#outputs.pushAudioRtp(rtp);
          this.#audio.pushPublisherRtp(rtp);
        }
      },
    });
    // RTMP pushes already running (a reconnect within the stream's life) keep their connections.
    this.#outputs.endPublisherAudio();
    this.#publisher = session;
    this.#audio.setPublisher(session.audioPayloadType);
    // A new publisher has its own RTP clock: its frames start a new run on the output timeline.
    this.#ingest.reset();
    this.#clock.restart();
    // Its decoder now, while its ICE and DTLS run under the slate, not at its first frame.
    this.#ingest.prepare(session);
    this.#livePushed = false;
    this.#outputs.start();
    this.#state = 'connecting';
    // A publisher whose params process frames needs the processor (a viewer alone never builds one).
    if (!this.#passthrough()) this.#slot.ensure();
    clearTimeout(this.#idleTimer);
    session.once('close', (reason) => this.#onPublisherClosed(session, reason));
    try {
      const answer = await session.answer();
      this.#everPublished = true;
      return { session, answer };
    } catch (err) {
      session.close('failed');
      throw err;
    }
  }

  #onDecoded(frame: Frame, now: number, decodeMs: number, capturedAt: number): void {
    if (this.#state === 'closed') return;
    if (this.#passthrough()) {
      // Nothing to process: decoded frames go straight to the encoders, in the main thread.
      const marks = this.#beforeFrame(this.#shownAt(capturedAt, frame.ptsMs));
      this.#encode(frame, now - decodeMs, marks, frame.ptsMs, capturedAt);
      return;
    }
    this.#slot.push(frame, now, decodeMs, capturedAt);
  }

  /**
   * Where viewers will see a frame captured at `capturedAt` (ms epoch) with RTP time `mediaMs` on
   * the node's clock: its output time (OutputClock), ms epoch. That is the time its sound is sent
   * with (ViewerAudio) and the time changes land by: a run of output frames can sit up to a frame
   * after its capture times for good (a run that started behind the slate; DRIFT_MS), and a change
   * placed by capture time then reached viewers up to that much after the beat it was locked to.
   */
  #shownAt(capturedAt: number, mediaMs: number): number {
    const toPerf = Date.now() - performance.now();
    return this.#clock.predict(mediaMs, capturedAt - toPerf) + toPerf;
  }

  /**
   * Before a frame viewers see at `shownAt` (ms epoch, #shownAt) is processed (or, with nothing to
   * process, encoded): the scheduled changes due by then, then the params that follow the audio of
   * that time. Returns the landings the frame carries.
   */
  #beforeFrame(shownAt: number): ParamsMark[] {
    const marks = this.#landings.atFrame(shownAt);
    const patch = this.#audio.atFrame(shownAt, this.#params);
    if (patch) {
      try {
        // To the processor only: the stream's params (store, status) stay what was asked; status shows the mapped values.
        this.#slot.update(patch);
      } catch (err) {
        this.#lastError = `audio mapping: ${(err as Error).message}`;
      }
    }
    return marks;
  }

  /**
   * Holds a change until its time (`applyAt`, ms epoch; null: the next frame) and applies it to
   * the first frame viewers see at or after it (its output time, #shownAt); `landed` says which output frame carries it. With no
   * frames flowing (no publisher, a stalled frame path) it applies at its time without a frame.
   */
  scheduleParams(s: ScheduledParams): void {
    this.#assertOpen();
    // A direct update was newer than a transition of the same keys; a scheduled change is not.
    this.#landings.add(s);
  }

  /** Drops a waiting change; false when none waits by that id. */
  cancelScheduled(id: string): boolean {
    return this.#landings.cancel(id);
  }

  /**
   * A live frame to the encoders, stamped on the output timeline from its source's RTP time on the
   * node's clock (`mediaMs`, CaptureClock's `ptsMs`) and capture time (`capturedAt`, ms epoch).
   */
  #encode(frame: Frame, inputAtMs: number, marks: ParamsMark[], mediaMs: number, capturedAt: number): void {
    const now = performance.now();
    const ptsMs = this.#clock.live(mediaMs, capturedAt - (Date.now() - now), now);
    if (ptsMs === null) {
      // Stale (queued through a stall the slate covered): its changes land with the next frame out.
      this.#landings.pushed(marks, -1);
      return;
    }
    this.#livePushed = true;
    this.#lastPushedDecodedAtMs = inputAtMs;
    this.#slate.live(frame, now);
    this.#landings.pushed(marks, this.#pushToEncoders(frame, ptsMs));
  }

  /**
   * One frame (live or slate) to the H.264 encoder, built or rebuilt at the frame's size, and the
   * VP8 branch, at `ptsMs` on the output timeline (OutputClock). Returns the PTS the H.264 encoder
   * gave it (its access unit carries it; -1: refused).
   */
  #pushToEncoders(frame: Frame, ptsMs: number): number {
    if (!this.#encoder || this.#encoder.width !== frame.width || this.#encoder.height !== frame.height) {
      this.#encoder?.close();
      this.#encoder = new EncoderBin({
        width: frame.width,
        height: frame.height,
        fps: this.#settings.outputFps,
        bitrateKbps: this.#settings.videoBitrateKbps,
        keyIntFrames: this.#settings.keyIntFrames,
        keyUnitMinIntervalMs: this.#settings.keyUnitMinIntervalMs,
        nice: this.#settings.encoderNice,
        logger: this.#logger,
        onAccessUnit: (au) => this.#onAccessUnit(au),
      });
    }
    const pts = this.#encoder.push(frame, ptsMs);
    this.#vp8.push(frame, ptsMs);
    return pts;
  }

  /** The encoder a viewer of `codec` is fed from (null while it is not running). */
  #encoderFor(codec: VideoCodec): EncoderBin | Vp8EncoderBin | null {
    return codec === 'VP8' ? this.#vp8.encoder : this.#encoder;
  }

  #onAccessUnit(au: EncodedAccessUnit): void {
    if (this.#state === 'closed') return;
    // Slate frames are output but not live signal: fps, latency and `started` count live frames only.
    const slate = this.#slate.accessUnitOut(au.pts);
    if (!slate) {
      this.#outRate.mark(au.atMs);
      if (au.encodeMs >= 0) this.#encodeT.add(au.encodeMs);
      this.#nodeT.add(au.atMs - this.#lastPushedDecodedAtMs);
    }
    // RTP time from the output timeline (capture time for live frames), 90 kHz: the publisher's frame intervals.
    const ts = this.#viewers.rtpTimestamp(au.ptsMs);
    this.#landings.accessUnit(au.pts, this.#outRate.count, ts);
    const nals = au.nals.filter((n) => nalType(n) !== NAL_AUD); // access unit delimiters: not needed over RTP
    this.#viewers.sendH264(nals, ts, au.keyframe);
    this.#outputs.pushVideo(au, slate);
    if (this.#state === 'connecting' && this.#publisher && !slate && this.#livePushed) {
      this.#state = 'live';
      this.#startedAt = Date.now();
      this.#logger.info(`started() | first output frame [streamId:${this.streamId}]`);
      this.safeEmit('started', { streamId: this.streamId, startedAt: this.#startedAt });
      this.#heartbeat = setInterval(() => this.#beat(), this.#settings.heartbeatMs);
    }
  }

  #beat(): void {
    const last = this.#outRate.lastAtMs;
    if (this.#state !== 'live' || last === undefined) return;
    this.safeEmit('live', { streamId: this.streamId, lastSignalAt: last, outputFps: this.#outRate.fps() });
  }

  #onPublisherClosed(session: WhipSession, reason: SessionCloseReason): void {
    if (session !== this.#publisher) return;
    this.#publisher = null;
    this.#audio.setPublisher(undefined);
    this.#ingest.stop();
    // The RTMP pushes keep their connections and carry the slate (decision 0011); the AAC encoder
    // belongs to this publisher's audio and goes (the pushes and HLS fill silence).
    this.#outputs.endPublisherAudio();
    // Watched outputs go on with the slate, so the HLS segment stays open and continuous; unwatched,
    // the open segment ends now (clips get it) and the next publisher starts after a discontinuity.
    const watched = this.#viewers.connected() > 0 || this.#outputs.watched;
    if (!watched) {
      // Frames stop with the publisher; the next one restarts the branch if VP8 viewers remain.
      this.#vp8.stop('publisher left');
      this.#outputs.endSegment();
    }
    this.#slot.clear();
    clearInterval(this.#heartbeat);
    const wasLive = this.#state === 'live';
    this.#state = 'idle';
    if (wasLive && this.#startedAt !== undefined) {
      this.safeEmit('ended', { streamId: this.streamId, startedAt: this.#startedAt, endedAt: this.#outRate.lastAtMs ?? Date.now(), reason });
    }
    this.#startedAt = undefined;
    this.#armIdle();
  }

  /**
   * Adds a viewer and returns it with its answer. 503-class MediaError when the stream has
   * maxViewersPerStream connected viewers, or maxPendingViewersPerStream still connecting: only
   * viewers that completed ICE and DTLS hold a slot, so offers that never connect cannot lock
   * real viewers out. A viewer that connects past the cap (a race of many at once) is closed.
   */
  async addViewer(offer: PreparedOffer, sessionId: string): Promise<{ session: WhepSession; answer: string }> {
    this.#assertOpen();
    const session = this.#viewers.create(offer, sessionId);
    clearTimeout(this.#idleTimer);
    session.on('connected', () => {
      if (this.#viewers.connected() > this.#settings.maxViewersPerStream) {
        this.#logger.warn(`addViewer() | closed a viewer that connected past the limit [streamId:${this.streamId}]`);
        session.close('closed');
        return;
      }
      this.#encoderFor(session.codec)?.requestKeyUnit();
      this.#publisher?.requestKeyframe('decoder');
    });
    session.on('keyframeRequest', () => this.#encoderFor(session.codec)?.requestKeyUnit());
    // A soundtrack's mix is encoded for viewers only while some take audio.
    if (session.audioPayloadType !== undefined) this.#outputs.syncAac();
    session.once('close', () => {
      if (session.codec === 'VP8' && this.#viewers.count('VP8') === 0) this.#vp8.viewersGone();
      this.#armIdle();
    });
    try {
      return { session, answer: await session.answer() };
    } catch (err) {
      session.close('failed');
      throw err;
    }
  }

  /**
   * Hot-applies params. Size and layout changes reconfigure the decoder in place (the encoder
   * follows the frame size). A
   * processor still being built gets them when it is ready; one that is not needed yet is built
   * (when a publisher is attached) once the params process frames.
   *
   * `storedAt` orders updates that reach the stream by different paths: the params a publisher's
   * grant read from the store, and the PATCHes delivered to the node meanwhile (ms epoch of the
   * store write that produced them). An update older than the newest applied one is stale: only
   * the keys the stream has never held apply (a stream a viewer made holds just the PATCHed
   * keys), so a grant read before a PATCH cannot undo it. Unversioned updates always apply.
   * Returns whether the update was stale, and the plan the processor ran for it (null when no
   * processor runs yet: the one built later starts from the latest params).
   */
  updateParams(update: LiveParams, storedAt?: number): { stale: boolean; plan: UpdatePlan | null } {
    this.#assertOpen();
    let params = update;
    let fresh = true;
    if (storedAt !== undefined && storedAt < this.#paramsStoredAt) {
      fresh = false;
      params = Object.fromEntries(Object.entries(update).filter(([k]) => !(k in this.#params)));
      this.#logger.info(`updateParams() | stale update, only unheld keys apply [streamId:${this.streamId}] [storedAt:${storedAt}] [holding:${this.#paramsStoredAt}] [keys:${Object.keys(params).join(',') || '-'}]`);
      if (Object.keys(params).length === 0) return { stale: true, plan: null };
    } else if (storedAt !== undefined) {
      this.#paramsStoredAt = storedAt;
    }
    this.#landings.interrupt(Object.keys(params));
    try {
      return { stale: !fresh, plan: this.#applyParams(params) };
    } catch (err) {
      this.#lastError = `params update failed: ${(err as Error).message}`;
      throw err;
    }
  }

  /**
   * Applies params now (the processor takes them from its next frame) and returns the processor's
   * plan, or null when none runs yet. Throws when the engine refuses them.
   */
  #applyParams(params: LiveParams): UpdatePlan | null {
    const next = { ...this.#params, ...params };
    const undo = params.audio_mappings !== undefined ? this.#audio.set(params.audio_mappings ?? []) : null;
    // Keys old mappings set go back to the stream's own values.
    const restore = Object.fromEntries((undo ?? []).filter((k) => !(k in params)).map((k) => [k, next[k]])) as LiveParams;
    let plan = this.#slot.update(engineParams({ ...restore, ...params }));
    // The processor never sees audio_mappings; the node applied the change from the next frame: hot.
    if (plan && undo) plan = { ...plan, mode: plan.mode === 'none' ? 'hot' : plan.mode, hot: [...plan.hot, 'audio_mappings'] };
    this.#params = next;
    // A direct value replaced what a mapping set (or a list it sets inside changed): the next frame sets them all again.
    this.#audio.paramsChanged();
    this.#paramsUpdatedAt = Date.now();
    if (this.#publisher && !this.#passthrough()) this.#slot.ensure();
    // Size and layout change in place: the decoder keeps its references (no key frame to wait for).
    this.#ingest.configure();
    return plan;
  }

  /** Ends the publisher session (viewers stay, waiting for the next publisher). */
  endPublisher(reason: SessionCloseReason): void {
    this.#publisher?.close(reason);
  }

  #armIdle(): void {
    clearTimeout(this.#idleTimer);
    if (this.#state === 'closed' || this.#publisher || this.#viewers.size > 0) return;
    this.#idleTimer = setTimeout(() => this.safeEmit('idle'), this.#settings.idleStreamMs);
  }

  status(): LiveStreamStatus {
    const sum = (t: StageTimer) => t.summary();
    return {
      streamId: this.streamId,
      state: this.#state,
      output: this.#slate.output(this.#encoder !== null),
      slate: this.#slate.status(),
      startedAt: this.#startedAt,
      lastInputAt: this.#ingest.inRate.lastAtMs,
      lastOutputAt: this.#outRate.lastAtMs,
      inputFps: this.#ingest.inRate.fps(),
      decodedFps: this.#ingest.decodedRate.fps(),
      outputFps: this.#outRate.fps(),
      framesIn: this.#ingest.inRate.count,
      framesOut: this.#outRate.count,
      framesDropped: this.#slot.framesDropped,
      decoderRestarts: this.#ingest.restarts,
      processor: this.#slot.state,
      pixelFormat: this.#ingest.format,
      latency: { decode: sum(this.#ingest.decodeT), process: sum(this.#slot.processTimer), encode: sum(this.#encodeT), node: sum(this.#nodeT) },
      ingest: this.#publisher?.stats() ?? null,
      viewers: this.#viewers.size,
      viewersByCodec: { H264: this.#viewers.count('H264'), VP8: this.#viewers.count('VP8') },
      viewerAudioHoldMs: this.#viewers.audioHoldMs,
      keyUnitsForced: this.#encoder?.keyUnitsForced ?? 0,
      vp8: this.#vp8.status(),
      params: this.#params,
      lastError: this.#lastError,
      lastErrorAt: this.#lastErrorAt,
      paramsUpdatedAt: this.#paramsUpdatedAt,
      ...this.#outputs.status(),
      pipeline: this.#slot.pipelineStatus(),
      ...(this.#audio.active ? { audioMappings: this.#audio.status() } : {}),
    };
  }

  /** Cumulative per-stage latency histograms since the stream was made, for /metrics. */
  latencyTotals(): Record<'decode' | 'process' | 'encode' | 'node', StageTotals> {
    return { decode: this.#ingest.decodeT.totals(), process: this.#slot.processTimer.totals(), encode: this.#encodeT.totals(), node: this.#nodeT.totals() };
  }

  /** Raw node-internal latency samples (ms), for benchmarks. */
  latencySamples(): { decode: readonly number[]; process: readonly number[]; encode: readonly number[]; node: readonly number[] } {
    return { decode: this.#ingest.decodeT.samples(), process: this.#slot.processTimer.samples(), encode: this.#encodeT.samples(), node: this.#nodeT.samples() };
  }

  /** Closes publisher, viewers, bins and processor. Emits `ended` if live, then `close`. */
  close(reason: SessionCloseReason = 'closed'): void {
    if (this.#state === 'closed') return;
    const steps: (() => void)[] = [
      () => this.#publisher?.close(reason),
      () => this.#viewers.closeAll(),
      () => this.#ingest.close(),
      () => this.#encoder?.close(),
      () => this.#vp8.close(),
      () => this.#slot.close(),
      // After the publisher's close flushed its last segment into the recording.
      () => this.#outputs.close(),
      () => this.#slate.close(),
    ];
    for (const step of steps) {
      try {
        step();
      } catch (err) {
        this.#logger.warn({ err }, `close() | cleanup step failed [streamId:${this.streamId}]`);
      }
    }
    this.#state = 'closed';
    clearInterval(this.#heartbeat);
    clearInterval(this.#statsTimer);
    clearTimeout(this.#idleTimer);
    this.#landings.close();
    this.#audio.close();
    this.safeEmit('close');
  }
}

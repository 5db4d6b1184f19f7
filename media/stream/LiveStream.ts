/**
 * One live stream on this node: at most one publisher (WhipSession), the readers of its output
 * (StreamHub: WHEP viewers, LL-HLS, RTMP, and any later output), and the objects between them, each
 * in its own file. LiveStream wires them and owns the lifecycle (state, started/live/ended, the
 * idle timer, close).
 *
 *   WhipSession ─frame─► VideoIngest ─► FrameSlot (processor) ─┬► EncoderBin (x264) ─AU─► hub.video (WHEP H.264, HLS, RTMP…)
 *                          (decoder)    or passthrough ────────┴──────────────── frame ─► hub.frame (WHEP's VP8 branch…)
 *   WhipSession ─Opus RTP─► OutputAudio ─► hub.opus (WHEP), hub.aac (HLS, RTMP; mixed with the soundtrack, if set)
 *   SlateSwitch ─slate frame─► the encoder and hub.frame while no live frame comes and a reader is watched
 *   ParamsLandings: scheduled params applied by capture time (CaptureClock), reported per frame
 *   AudioMappings: params that follow the audio (publisher's Opus decoded, or the soundtrack), set per frame by capture time
 *   OutputClock: every frame to the encoders stamped on one timeline (live: capture time; slate: node clock)
 *
 * Encode once per stream: every reader takes the same access units (a reader that needs another
 * codec or size encodes raw frames itself, only while it runs: WHEP's VP8 branch). A slow
 * processor lowers fps but never adds latency (the one-frame slot keeps the newest frame).
 *
 * The stream makes its standard readers (WHEP; LL-HLS when on; RTMP) and knows them no further:
 * the node reaches them through `readers.find(…)`, and a new output is one more `readers.add`.
 */
import type { OutboundPolicy } from '../rtmp/RtmpRelay.ts';
import { AudioMappings } from './AudioMappings.ts';
import { HlsOutput } from '../hls/HlsOutput.ts';
import { OutputAudio } from './OutputAudio.ts';
import { RtmpOutputs } from '../rtmp/RtmpOutputs.ts';
import { StreamHub } from './StreamHub.ts';
import { WhepOutput } from '../webrtc/WhepOutput.ts';
import type { Logger } from 'pino';
import { EncoderBin, type EncodedAccessUnit } from '../gst/EncoderBin.ts';
import { InvalidStateError } from '../errors.ts';
import { DEFAULT_PARAMS, HOT_KEYS, planUpdate, type ParamsChange, type StreamParams, type UpdatePlan } from '../../native/params/index.ts';
import { type Frame, type FrameProcessorFactory, type PixelFormat, type LiveParams } from './FrameProcessor.ts';
import { FrameSlot } from './FrameSlot.ts';
import { OutputClock, rtpTime90k } from './OutputClock.ts';
import { Rendition } from './Rendition.ts';
import { ParamsLandings } from './ParamsLandings.ts';
import type { LiveStreamEvents, LiveStreamState, LiveStreamStatus } from './LiveStreamStatus.ts';
import type { ParamsMark, ScheduledParams } from './ParamsSchedule.ts';
import { VideoIngest } from './VideoIngest.ts';
import type { TransportOptions } from '../webrtc/PeerTransport.ts';
import type { PreparedOffer } from '../webrtc/Sdp.ts';
import type { MediaSettings } from '../settings.ts';
import { SlateImage } from './SlateImage.ts';
import type { ImageDecoder } from '../../images/index.ts';
import { SlateSwitch } from './SlateSwitch.ts';
import { Soundtrack, type SoundtrackSpec } from './Soundtrack.ts';
import { RateMeter, StageTimer, type StageTotals } from '../StageTimer.ts';
import { TypedEmitter } from '../TypedEmitter.ts';
import { WhipSession, type SessionCloseReason } from '../webrtc/WhipSession.ts';

export type { EndedInfo, LiveInfo, LiveStreamEvents, LiveStreamState, LiveStreamStatus, StartedInfo } from './LiveStreamStatus.ts';

export interface LiveStreamOptions {
  streamId: string;
  params: LiveParams;
  settings: MediaSettings;
  transport: TransportOptions;
  createProcessor: FrameProcessorFactory;
  /** Address rules for the RTMP pushes' connections. */
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

/** Every key of the params is held (a grant's or a PATCH's params), not only the PATCHed ones of a stream a viewer made. */
function isFull(params: LiveParams): boolean {
  return Object.keys(DEFAULT_PARAMS).every((k) => k in params);
}

/** A plan by key alone, for params not yet held in full (no processor runs on them yet): hot keys hot, the rest reload. */
function byKey(keys: readonly string[]): UpdatePlan {
  const hot = keys.filter((k) => HOT_KEYS.has(k as keyof StreamParams)) as (keyof StreamParams)[];
  const reload = keys.filter((k) => !HOT_KEYS.has(k as keyof StreamParams)) as (keyof StreamParams)[];
  return { mode: reload.length > 0 ? 'reload' : hot.length > 0 ? 'hot' : 'none', hot, reload };
}

/** The keys of `params` in `keys`, by their values there. */
function pick(params: LiveParams, keys: readonly string[]): LiveParams {
  return Object.fromEntries(keys.filter((k) => k in params).map((k) => [k, params[k as keyof LiveParams]])) as LiveParams;
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
  /** The smaller encodes (settings `renditions`), while a reader wants them (empty otherwise). */
  #renditions: Rendition[] = [];
  /** The readers of the output (WHEP, LL-HLS, RTMP, …): the node reaches them through `find`. */
  readonly readers: StreamHub;
  /** The output's RTP clock (90 kHz) starts here, ms on the node's monotonic clock: one clock for every reader. */
  readonly #rtpClockStart = performance.now();
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
  /** The output audio (the publisher's, or mixed with the soundtrack) and the encoders the readers want. */
  readonly #audioOut: OutputAudio;
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
    this.readers = new StreamHub({
      streamId: this.streamId,
      requestKeyUnit: () => this.#encoder?.requestKeyUnit(),
      requestSourceKeyframe: () => this.#publisher?.requestKeyframe('decoder'),
      rtpTimestamp: (ptsMs) => this.#rtpTimestamp(ptsMs),
      changed: () => this.#readersChanged(),
      logger: opts.logger,
    });
    this.readers.on('error', (message) => (this.#lastError = message));
    this.#audioOut = new OutputAudio({
      streamId: this.streamId,
      settings: opts.settings,
      hub: this.readers,
      audioPayloadType: () => this.#publisher?.audioPayloadType,
      onError: (message) => (this.#lastError = message),
      logger: opts.logger,
    });
    this.#statsTimer = setInterval(() => {
      void this.#publisher?.refreshStats().catch(() => undefined);
      this.#audioOut.sync();
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
      apply: (patch) => this.#apply(this.#nodeChange(patch)),
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
        const watched = this.readers.watched;
        return opts.slateAllowed ? opts.slateAllowed(watched) : watched;
      },
      processing: () => this.#slot.processing,
      size: () => this.#slateSize(),
      // Slate frames are stamped by the node, continuing the live timeline.
      push: (frame) => this.#pushToEncoders(frame, this.#clock.slate(performance.now())),
      ...(opts.slateImagePath && opts.images ? { image: new SlateImage({ path: opts.slateImagePath, logger: opts.logger, images: opts.images }) } : {}),
      logger: opts.logger,
    });
    // The standard readers; more join through `readers.add` (a test's own, an edge relay, a rendition).
    const log = opts.logger;
    this.readers.add((ctx) => new WhepOutput(ctx, { settings: opts.settings, transport: opts.transport, logger: log }));
    if (opts.settings.hlsEnabled) this.readers.add((ctx) => new HlsOutput(ctx, { settings: opts.settings, ...(opts.recordingsDir ? { recordingsDir: opts.recordingsDir } : {}), logger: log }));
    this.readers.add((ctx) => new RtmpOutputs(ctx, { ...(opts.outboundPolicy ? { policy: opts.outboundPolicy } : {}), ffmpegPath: opts.settings.ffmpegPath, logger: log }));
    this.#armIdle();
  }

  /** The output's RTP time (90 kHz) of an output time (ms, node's monotonic clock): what every reader and every landing reports. */
  #rtpTimestamp(ptsMs: number): number {
    return rtpTime90k(ptsMs, this.#rtpClockStart);
  }

  /** A reader's demand changed: the audio encoders follow it, and a reader that holds the stream stops its idle timer. */
  #readersChanged(): void {
    // Readers are added in the constructor before the audio exists.
    if (this.#state === 'closed' || !this.#audioOut) return;
    this.#audioOut.readersChanged();
    this.#armIdle();
  }

  get state(): LiveStreamState {
    return this.#state;
  }

  get params(): LiveParams {
    return this.#params;
  }

  /** A reader is watched (the node holds an idle stream for its LL-HLS players and RTMP pushes while one is). */
  get outputConsumed(): boolean {
    return this.#state !== 'closed' && this.readers.watched;
  }

  get publisher(): WhipSession | null {
    return this.#publisher;
  }

  /** A publisher attached at least once; false for a stream made by viewers waiting for it. */
  get everPublished(): boolean {
    return this.#everPublished;
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
      this.#audioOut.setSoundtrack(null);
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
    this.#audioOut.setSoundtrack(soundtrack);
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
        const current = session === this.#publisher;
        this.#audioOut.pushPublisherRtp(rtp, current);
        if (current) this.#audio.pushPublisherRtp(rtp);
      },
    });
    this.#audioOut.endPublisherAudio();
    this.#publisher = session;
    this.#audio.setPublisher(session.audioPayloadType);
    // A new publisher has its own RTP clock: its frames start a new run on the output timeline.
    this.#ingest.reset();
    this.#clock.restart();
    // Its decoder now, while its ICE and DTLS run under the slate, not at its first frame.
    this.#ingest.prepare(session);
    this.#livePushed = false;
    // RTMP pushes already running (a reconnect within the stream's life) keep their connections.
    this.readers.publisherAttached();
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
        // To the processor only: the stream's params (store, status) stay what was asked; status
        // shows the mapped values. Mapped params are hot by rule (MAPPABLE_PARAMS): planned as such.
        const hot = Object.keys(patch) as (keyof StreamParams)[];
        this.#slot.update({ target: { ...engineParams(this.#params), ...patch } as StreamParams, plan: { mode: 'hot', hot, reload: [] } });
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
   * One frame (live or slate) to the H.264 encoder, built or rebuilt at the frame's size, and to
   * the readers that encode frames themselves, at `ptsMs` on the output timeline (OutputClock). Returns the PTS the H.264 encoder
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
    this.readers.frame(frame, ptsMs);
    this.#syncRenditions();
    for (const r of this.#renditions) r.frame(frame, ptsMs);
    return pts;
  }

  /**
   * Renditions run while a reader wants them (an LL-HLS player, a WHEP viewer, an RTMP push of
   * one); unwatched, a stream encodes once. Their encoders start on the stream encoder's next key
   * frame without asking for one (LL-HLS joins at the next segment, whose key frame its packager
   * asks for anyway: asking here too cut that segment in half).
   */
  #syncRenditions(): void {
    const want = this.readers.wantsRenditions && this.#state !== 'closed';
    if (want && this.#renditions.length === 0 && this.#settings.renditions.length > 0) {
      this.#renditions = this.#settings.renditions.map(
        (spec) =>
          new Rendition({
            streamId: this.streamId,
            spec,
            settings: this.#settings,
            logger: this.#logger,
            onAccessUnit: (au, slate) => this.readers.rendition(spec.name, au, slate),
            onError: (message) => (this.#lastError = message),
          }),
      );
    } else if (!want && this.#renditions.length > 0) {
      for (const r of this.#renditions) r.close();
      this.#renditions = [];
    }
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
    this.#landings.accessUnit(au.pts, this.#outRate.count, this.#rtpTimestamp(au.ptsMs));
    this.readers.video(au, slate);
    for (const r of this.#renditions) r.streamAccessUnit(au, slate);
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
    // The readers keep going and carry the slate (decision 0011); the AAC encoder belongs to this
    // publisher's audio and goes (the readers fill silence).
    this.#audioOut.endPublisherAudio();
    // Watched, the readers go on with the slate (the HLS segment stays open and continuous);
    // unwatched, they end what the publisher's frames fed (HLS: the open segment; WHEP: the VP8 branch).
    this.readers.publisherLeft(this.readers.watched);
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
   * Takes a change planned where it was asked for (a PATCH: the API merged, checked and planned it
   * once) and hands it on as it is: hot keys apply from the next frame, reload keys rebuild the
   * engine's pipeline in the background. Size and layout changes reconfigure the decoder in place
   * (the encoder follows the frame size). A processor still being built gets the latest params when
   * it is ready; one that is not needed yet is built (when a publisher is attached) once the params
   * process frames.
   *
   * `storedAt` orders changes that reach the stream by different paths: the params a publisher's
   * grant read from the store (`grant`), and the PATCHes delivered to the node meanwhile (ms epoch
   * of the store write that produced them). A change older than the newest applied one is stale:
   * only the keys the stream has never held apply (a stream a viewer made holds just the PATCHed
   * keys), so a grant read before a PATCH cannot undo it. Unversioned changes always apply.
   * Returns whether it was stale, and the plan the processor ran (null when no processor runs yet).
   */
  updateParams(change: ParamsChange, storedAt?: number): { stale: boolean; plan: UpdatePlan | null } {
    this.#assertOpen();
    if (storedAt !== undefined && storedAt < this.#paramsStoredAt) {
      const keys = [...change.plan.hot, ...change.plan.reload].filter((k) => !(k in this.#params));
      this.#logger.info(`updateParams() | stale update, only unheld keys apply [streamId:${this.streamId}] [storedAt:${storedAt}] [holding:${this.#paramsStoredAt}] [keys:${keys.join(',') || '-'}]`);
      if (keys.length === 0) return { stale: true, plan: null };
      const only = (list: readonly (keyof StreamParams)[]) => list.filter((k) => keys.includes(k));
      const plan: UpdatePlan = { mode: only(change.plan.reload).length > 0 ? 'reload' : 'hot', hot: only(change.plan.hot), reload: only(change.plan.reload) };
      return { stale: true, plan: this.#take({ target: { ...this.#params, ...pick(change.target, keys) } as StreamParams, plan }) };
    }
    if (storedAt !== undefined) this.#paramsStoredAt = storedAt;
    return { stale: false, plan: this.#take(change) };
  }

  /**
   * The stored params a publisher's grant read (full params), with the store write's time: planned
   * here, once, against the params the stream holds (a stream a viewer made holds only PATCHed
   * keys), then taken as any change (see updateParams for `storedAt`).
   */
  grant(params: LiveParams, storedAt?: number): { stale: boolean; plan: UpdatePlan | null } {
    this.#assertOpen();
    const target = { ...this.#params, ...params } as StreamParams;
    const plan = isFull(this.#params) ? planUpdate(this.#params as StreamParams, target) : byKey(Object.keys(params));
    if (plan.mode === 'none') {
      if (storedAt !== undefined && storedAt >= this.#paramsStoredAt) this.#paramsStoredAt = storedAt;
      return { stale: false, plan };
    }
    return this.updateParams({ target, plan }, storedAt);
  }

  #take(change: ParamsChange): UpdatePlan | null {
    this.#landings.interrupt([...change.plan.hot, ...change.plan.reload]);
    try {
      return this.#apply(change);
    } catch (err) {
      this.#lastError = `params update failed: ${(err as Error).message}`;
      throw err;
    }
  }

  /**
   * A change the node makes itself (a scheduled change landing, a step of its transition): planned
   * here, once, against the params the stream holds.
   */
  #nodeChange(patch: LiveParams): ParamsChange {
    const target = { ...this.#params, ...patch } as StreamParams;
    return { target, plan: isFull(this.#params) ? planUpdate(this.#params as StreamParams, target) : byKey(Object.keys(patch)) };
  }

  /**
   * Applies a change now (the processor takes it from its next frame) and returns the processor's
   * plan, or null when none runs yet. Throws when the engine refuses it.
   */
  #apply(change: ParamsChange): UpdatePlan | null {
    const { target, plan } = change;
    const keys: string[] = [...plan.hot, ...plan.reload];
    const undo = keys.includes('audio_mappings') ? this.#audio.set(target.audio_mappings ?? []) : null;
    // Keys old mappings set go back to the stream's own values: the node adds them to the change, hot.
    const restore = (undo ?? []).filter((k) => !keys.includes(k));
    const hot = [...plan.hot.filter((k) => k !== 'audio_mappings'), ...restore];
    const engine: UpdatePlan = { mode: plan.reload.length > 0 ? 'reload' : hot.length > 0 ? 'hot' : 'none', hot, reload: plan.reload };
    // Also with nothing for the engine (an audio_mappings change alone): a running processor answers, so the plan is the node's.
    let ran = this.#slot.update({ target: engineParams(target) as StreamParams, plan: engine });
    // The processor never sees audio_mappings; the node applied the change from the next frame: hot.
    if (undo) ran = ran ? { ...ran, mode: ran.mode === 'none' ? 'hot' : ran.mode, hot: [...ran.hot, 'audio_mappings'] } : null;
    this.#params = target;
    // A direct value replaced what a mapping set (or a list it sets inside changed): the next frame sets them all again.
    this.#audio.paramsChanged();
    this.#paramsUpdatedAt = Date.now();
    if (this.#publisher && !this.#passthrough()) this.#slot.ensure();
    // Size and layout change in place: the decoder keeps its references (no key frame to wait for).
    this.#ingest.configure();
    return ran;
  }

  /** Ends the publisher session (viewers stay, waiting for the next publisher). */
  endPublisher(reason: SessionCloseReason): void {
    this.#publisher?.close(reason);
  }

  #armIdle(): void {
    clearTimeout(this.#idleTimer);
    if (this.#state === 'closed' || this.#publisher || this.readers.holds) return;
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
      outputLateMs: this.#clock.lateMs,
      framesDropped: this.#slot.framesDropped,
      decoderRestarts: this.#ingest.restarts,
      processor: this.#slot.state,
      pixelFormat: this.#ingest.format,
      latency: { decode: sum(this.#ingest.decodeT), process: sum(this.#slot.processTimer), encode: sum(this.#encodeT), node: sum(this.#nodeT) },
      ingest: this.#publisher?.stats() ?? null,
      keyUnitsForced: this.#encoder?.keyUnitsForced ?? 0,
      readers: this.readers.status(),
      renditions: this.#renditions.map((r) => r.status()),
      soundtrack: this.#soundtrack?.status() ?? null,
      params: this.#params,
      lastError: this.#lastError,
      lastErrorAt: this.#lastErrorAt,
      paramsUpdatedAt: this.#paramsUpdatedAt,
      pipeline: this.#slot.pipelineStatus(),
      ...(this.#audio.active ? { audioMappings: this.#audio.status(), audioMappingWaitsExpired: this.#audio.waitsExpired } : {}),
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
      () => this.#ingest.close(),
      () => this.#encoder?.close(),
      () => {
        for (const r of this.#renditions) r.close();
      },
      () => this.#slot.close(),
      () => this.#audioOut.close(),
      // After the publisher's close flushed its last segment into the recording.
      () => this.readers.close(),
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

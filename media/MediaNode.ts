/**
 * The media node: owns this process's live streams and their WHIP/WHEP sessions (its HTTP
 * endpoints, which call it, are mounted by `registerMediaRoutes`). The control plane decides who
 * may publish or play (resolveIngest/resolvePlayback) and listens for `started`/`live`/`ended`.
 *
 * Tree: MediaNode → LiveStream (createStream) → WhipSession, WhepSession, DecoderBin, EncoderBin, Vp8EncoderBin.
 */
import type { OutboundPolicy } from './rtmp/RtmpRelay.ts';
import { HlsOutput } from './hls/HlsOutput.ts';
import { RtmpOutputs, type RtmpDestination } from './rtmp/RtmpOutputs.ts';
import { WhepOutput } from './webrtc/WhepOutput.ts';
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { AwayHold } from './stream/AwayHold.ts';
import { loadCodecPlugins } from './gst/CodecPlugins.ts';
import { writeClipMp4 } from './hls/ClipMp4.ts';
import { SLATE_IMAGE_FILE } from './stream/SlateImage.ts';
import { takePcm, type SoundtrackSpec } from './stream/Soundtrack.ts';
import { ImageDecoder } from '../images/index.ts';
import { InvalidStateError, MediaError } from './errors.ts';
import { defaultProcessorFactory, type FrameProcessorFactory, type LiveParams } from './stream/FrameProcessor.ts';
import { MemoryTrim } from './gst/MemoryTrim.ts';
import { EdgeStream, type EdgeStreamStatus } from './stream/EdgeStream.ts';
import { EDGE_HEADER, FORWARDED_HEADER, edgePullFor } from './NodeSignatures.ts';
import { LiveStream, type EndedInfo, type LiveInfo, type LiveStreamStatus, type StartedInfo } from './stream/LiveStream.ts';
import type { ParamsLanding } from './stream/ParamsLandings.ts';
import type { ScheduledParams } from './stream/ParamsSchedule.ts';
import type { ParamsChange, UpdatePlan } from '../native/params/index.ts';
import { DEFAULT_MEDIA_SETTINGS, type MediaSettings } from './settings.ts';
import { prepareOffer, type PreparedOffer } from './webrtc/Sdp.ts';
import { TypedEmitter } from './TypedEmitter.ts';
import { holdWebRtcEgress, type WhepSession } from './webrtc/WhepSession.ts';
import type { TurnConfig } from './webrtc/IceServers.ts';
import { DEFAULT_UDP_RECV_BUFFER_BYTES, udpRecvBufferCap, type TransportOptions } from './webrtc/PeerTransport.ts';
import { RateLimiter } from './RateLimiter.ts';
import type { WhipSession } from './webrtc/WhipSession.ts';

/** A publisher that may go live. */
export interface IngestGrant {
  streamId: string;
  params: LiveParams;
  /** When the store last wrote these params (ms epoch): orders them against PATCHes in flight. */
  paramsStoredAt?: number;
  outputRtmpUrl?: string | undefined;
  /** The stream's other RTMP destinations. */
  rtmpDestinations?: RtmpDestination[] | undefined;
  /** Record the output (the stream's `record`). */
  record?: boolean | undefined;
  /** The song mixed into the output audio (the stream's soundtrack). */
  soundtrack?: SoundtrackSpec | undefined;
}

/**
 * A publisher with a valid key that may not go live now; `refused` is shown to the streamer.
 * `status`: 402 (the account's streaming allowance is used up, the default) or 429 (the
 * account's plan allows no more live streams at once).
 */
export interface IngestRefusal {
  refused: string;
  status?: 402 | 429;
}

/** The stream a WHEP request plays, as the control plane resolved its playback id. */
/**
 * A publish or play request the control plane's admission rules see before the node builds
 * anything (MediaNodeOptions.admit).
 */
export interface AdmissionRequest {
  /** `publish` (WHIP) or `read` (WHEP, LL-HLS). */
  action: 'publish' | 'read';
  protocol: 'whip' | 'whep' | 'hls';
  streamId: string;
  /** The client's address (an api replica's signed forward, else the TCP peer's). */
  clientIp: string;
  /** The request's query parameters, the first value of each (LL-HLS `_HLS_*` left out). */
  query: Record<string, string>;
  /** `?jwt=`, else (viewers only) the `Authorization: Bearer` token; null when none. A publisher's Bearer is its stream key, never passed on. */
  token: string | null;
}

/** Admitted, or refused with 401 (no or bad credentials) or 403 (refused by the rule, or the rule could not be checked). */
export type AdmissionVerdict = { admitted: true } | { admitted: false; status: 401 | 403; reason: string };

export interface PlaybackTarget {
  streamId: string;
  /**
   * The account that owns the stream: viewers waiting for streams without a publisher are bounded
   * per account (maxWaitingStreamsPerAccount). Unknown: the stream counts as its own owner.
   */
  accountId?: string | undefined;
  /**
   * The stream's origin when another live media node holds it (scale-out): this node relays it to
   * the viewer as an edge (decision 0030), pulling it once from `url` (the origin's public URL).
   */
  origin?: { nodeId: string; url: string } | undefined;
}

/** Who is asking, as the HTTP layer saw them (for per-client limits). */
export interface ClientInfo {
  /** The client's IP address (behind an api replica: the one it forwarded for). */
  address: string;
  /** The edge node (its URL) whose signed pull this is (NodeSignatures.ts): one session for its viewers, outside the per-client limits. */
  edge?: string | undefined;
}

/** What this node carries of one stream: as its origin (the publisher is here) or as an edge relaying it. */
export interface StreamAudience {
  role: 'origin' | 'edge';
  /** Connected WHEP viewers here (an origin's count includes the edges' pulls). */
  viewers: number;
  /** WHEP sessions here, connected or still connecting: what placement counts (a viewer placed a moment ago is in it). */
  sessions: number;
  /** Of the connected, edges' pulls (origin only). */
  edges: number;
}

/**
 * How long an update for a stream the node does not hold is kept, ms: it only has to outlive a
 * publisher's grant lookup (a few store round trips), and the store holds the params anyway.
 */
const EARLY_UPDATE_TTL_MS = 60_000;
/** ms between checks of a stream held for its HLS players or RTMP pushes (whether they are still there). */
const AWAY_CHECK_MS = 1000;
/** Streams with a kept early update at most (each a few kB of params). */
const EARLY_UPDATES_MAX = 1000;

/** Streams a node holds with a publisher at most, when not configured. */
export const DEFAULT_CAPACITY = 8;

export interface MediaNodeOptions {
  /** Base URL clients reach this node at (e.g. https://media1.example.com); Location headers use it. */
  publicUrl: string;
  /** Local addresses to gather on and advertise as host candidates (default: every interface). */
  iceAddresses?: string[];
  /** Addresses clients reach the node at that are not on its interfaces (1:1 NAT, Docker): host candidates are offered on them too. */
  announcedAddresses?: string[];
  /** Inclusive UDP port range for ICE (and ICE-TCP). */
  udpPortRange?: [number, number];
  /** Offer passive ICE-TCP candidates too. */
  iceTcp?: boolean;
  /** Receive buffer asked for each publisher's UDP socket, bytes. Default DEFAULT_UDP_RECV_BUFFER_BYTES (4 MiB). */
  udpRecvBufferBytes?: number;
  /** STUN servers offered to clients (`Link: <stun:…>; rel="ice-server"`). */
  stunUrls?: string[];
  /** TURN servers offered to clients, with per-session credentials from the shared secret. */
  turn?: TurnConfig;
  /**
   * Streams this node holds with a publisher at most: beyond it a WHIP publish for a stream not
   * already live here gets 503 and builds nothing. Viewers never take a slot (see play()).
   * Default DEFAULT_CAPACITY.
   */
  capacity?: number;
  /**
   * Secret an api replica signs the client address it forwards a WHIP/WHEP request for with
   * (`x-reverie-forwarded`); without it (or with a bad signature) the TCP peer's address counts.
   */
  forwardedSecret?: string;
  logger: Logger;
  /**
   * Checks a publisher's Bearer token; null → 401, a refusal → 402 with its reason (the account
   * may not stream now: its monthly streaming allowance is used up). `outputRtmpUrl` (the stream's
   * output_rtmp_url, optional) makes the node push the output there over RTMP while this
   * publisher is live.
   */
  resolveIngest(streamId: string, bearerToken: string): Promise<IngestGrant | IngestRefusal | null>;
  /**
   * Maps a playback id to its stream and the account that owns it (what bounds the viewers
   * waiting for that account's streams that are not live); null → 404.
   */
  resolvePlayback(playbackId: string): Promise<PlaybackTarget | null>;
  /**
   * The stream's (or its account's) admission rule: asked after the key or playback id resolved
   * and before any session, peer connection or slot exists. Absent: everyone those admit.
   */
  admit?(request: AdmissionRequest): Promise<AdmissionVerdict>;
  /** Builds each stream's frame processor (default: native image chains, no diffusion). */
  createProcessor?: FrameProcessorFactory;
  /** Tuning knobs (defaults in settings.ts). */
  settings?: Partial<MediaSettings>;
  /**
   * Address rules for every outbound connection the node makes for a stream (RTMP pushes): the
   * control plane passes the webhooks' SSRF policy. Without one a push dials what DNS says.
   */
  outboundPolicy?: OutboundPolicy;
  /**
   * Folder recordings are written under (`<dir>/<streamId>/<recordingId>/`): the shared blob
   * store's `recordings/`, so the API serves what any node wrote. Without it nothing is recorded.
   */
  recordingsDir?: string;
  /** Folder of the streams' slate images (`slates` in the blob store, where the API puts them); without it the slate shows no image. */
  slatesDir?: string;
  /** Folder of the songs' files (`songs` in the blob store, where the render workers put them): soundtracks are read there. Without it none plays. */
  songsDir?: string;
  /** The process's decoder for images (its caps are the operator's IMAGE_* settings); default: one with the default caps. */
  images?: ImageDecoder;
}

export type MediaNodeEvents = {
  started: [StartedInfo];
  live: [LiveInfo];
  ended: [EndedInfo];
  /** A scheduled change (scheduleParams) landed on a frame, or without one. */
  landed: [ParamsLanding];
};

/**
 * A session as the HTTP layer sees it; `trickled` counts the candidates its PATCHes added.
 * `keyDigest` (publishers): SHA-256 of the Bearer token that created the session — PATCH and
 * DELETE must present the same one (a viewer's session URL is its only credential).
 */
export type SessionEntry = ({ kind: 'whip'; session: WhipSession; keyDigest: Buffer } | { kind: 'whep'; session: WhepSession }) & { trickled: number };

/** SHA-256 of a session credential: what SessionEntry keeps, compared in constant time on PATCH and DELETE. */
export function sessionKeyDigest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

/** A clip written by `MediaNode.clip`. */
export interface ClipResult {
  /** Media time of the clip, ms (whole segments: at least what was asked, up to one segment more; less when less was held). */
  durationMs: number;
  /** Bytes of the MP4. */
  size: number;
  /** ms epoch of its first frame. */
  startedAtMs: number;
}

export class MediaNode extends TypedEmitter<MediaNodeEvents> {
  readonly settings: MediaSettings;
  readonly #opts: MediaNodeOptions;
  readonly #logger: Logger;
  /** Receive buffer asked for each publisher's UDP socket, bytes (options or the default). */
  readonly #udpRecvBufferBytes: number;
  readonly #streams = new Map<string, LiveStream>();
  /** Streams another node holds that this one relays to its own viewers (decision 0030), by stream id. */
  readonly #edges = new Map<string, EdgeStream>();
  readonly #sessions = new Map<string, SessionEntry>();
  /**
   * Params changes for streams this node does not hold yet: a PATCH that lands while a publisher's
   * grant is being resolved (the grant read the store before it) is applied when the stream is
   * made instead of being lost. A change carries the full params, so the newest (by storedAt) is
   * the one kept. Kept EARLY_UPDATE_TTL_MS, at most EARLY_UPDATES_MAX streams.
   */
  readonly #early = new Map<string, { change: ParamsChange; storedAt: number | undefined; atMs: number }>();
  /**
   * Viewer sessions not connected yet, per client address: when each was admitted (ms,
   * performance.now()), oldest first. The oldest is closed at connectTimeoutMs at the latest,
   * which is what a refused client's Retry-After says.
   */
  readonly #pendingViewers = new Map<string, number[]>();
  /** The owner (account id, else the stream id) of each stream a viewer asked for: what bounds waiting streams. */
  readonly #owners = new Map<string, string>();
  /** Streams that never had a publisher whose slate runs now (at most maxWaitingSlates). */
  readonly #waitingSlates = new Set<LiveStream>();
  /** Request limits of the WHIP/WHEP endpoints (settings: *PerMinute). */
  readonly limits: { whipPerAddress: RateLimiter; whepPerAddress: RateLimiter; whepPerPlayback: RateLimiter };
  readonly capacity: number;
  /** Gives memory freed by closed streams back to the kernel (its counts go to /metrics). */
  readonly memoryTrim: MemoryTrim;
  readonly #releaseEgress: () => void;
  readonly #images: ImageDecoder;
  #closed = false;
  #ending: Promise<void> = Promise.resolve();

  constructor(opts: MediaNodeOptions) {
    const logger = opts.logger.child({ module: 'media' });
    super(logger);
    this.#opts = opts;
    this.#logger = logger;
    this.#udpRecvBufferBytes = opts.udpRecvBufferBytes ?? DEFAULT_UDP_RECV_BUFFER_BYTES;
    this.settings = { ...DEFAULT_MEDIA_SETTINGS, ...opts.settings };
    this.capacity = opts.capacity ?? DEFAULT_CAPACITY;
    this.#images = opts.images ?? new ImageDecoder();
    // Now, not inside the first publisher's frame path: see CodecPlugins.ts.
    loadCodecPlugins(logger);
    this.#releaseEgress = holdWebRtcEgress();
    this.memoryTrim = new MemoryTrim({ afterCloseMs: this.settings.memoryTrimAfterCloseMs, intervalMs: this.settings.memoryTrimIntervalMs, logger });
    const minute = (max: number) => ({ max, windowMs: 60_000 });
    this.limits = {
      whipPerAddress: new RateLimiter(minute(this.settings.whipPerAddressPerMinute)),
      whepPerAddress: new RateLimiter(minute(this.settings.whepPerAddressPerMinute)),
      whepPerPlayback: new RateLimiter(minute(this.settings.whepPerPlaybackPerMinute)),
    };
    const asked = this.#udpRecvBufferBytes;
    const cap = udpRecvBufferCap();
    if (cap !== null && cap < asked) {
      // The kernel grants less without a word; under load that difference is dropped publisher packets.
      logger.warn(
        `MediaNode() | UDP receive buffers capped at ${cap} bytes by net.core.rmem_max (asked ${asked}): a busy node will drop publisher packets; ` +
          `raise it: sysctl -w net.core.rmem_max=${asked} (docs/operations.md, "Host tuning")`,
      );
    }
  }

  get options(): Readonly<MediaNodeOptions> {
    return this.#opts;
  }

  /** How this node's peer connections gather and bind (every stream's and relay's). */
  #transport(): TransportOptions {
    const o = this.#opts;
    return { iceAddresses: o.iceAddresses, announcedAddresses: o.announcedAddresses, udpPortRange: o.udpPortRange, iceTcp: o.iceTcp, udpRecvBufferBytes: this.#udpRecvBufferBytes };
  }

  /** Returns the stream, creating it (idle, no pipelines yet) if needed. */
  createStream(streamId: string, params: LiveParams = {}): LiveStream {
    if (this.#closed) throw new InvalidStateError('media node closed');
    const existing = this.#streams.get(streamId);
    if (existing) return existing;
    const stream: LiveStream = new LiveStream({
      streamId,
      params,
      settings: this.settings,
      transport: this.#transport(),
      createProcessor: this.#opts.createProcessor ?? defaultProcessorFactory,
      ...(this.#opts.outboundPolicy ? { outboundPolicy: this.#opts.outboundPolicy } : {}),
      ...(this.#opts.recordingsDir ? { recordingsDir: join(this.#opts.recordingsDir, streamId) } : {}),
      ...(this.#opts.slatesDir ? { slateImagePath: join(this.#opts.slatesDir, streamId, SLATE_IMAGE_FILE), images: this.#images } : {}),
      slateAllowed: (watched): boolean => this.#slateAllowed(stream, watched),
      logger: this.#logger.child({ streamId }),
    });
    this.#streams.set(streamId, stream);
    const early = this.#takeEarly(streamId);
    if (early) stream.updateParams(early.change, early.storedAt);
    stream.on('started', (info) => this.safeEmit('started', info));
    stream.on('live', (info) => this.safeEmit('live', info));
    stream.on('ended', (info) => this.safeEmit('ended', info));
    stream.on('landed', (info) => this.safeEmit('landed', info));
    // Idle (no publisher, no WHEP viewer): released, unless LL-HLS players or RTMP pushes still
    // take its slate; then held while they do, up to idleHoldMaxMs.
    const hold = new AwayHold(stream, {
      maxMs: this.settings.idleHoldMaxMs,
      checkMs: AWAY_CHECK_MS,
      release: () => stream.close('closed'),
      logger: this.#logger,
    });
    stream.on('idle', () => hold.onIdle());
    stream.once('close', () => {
      hold.cancel();
      this.#waitingSlates.delete(stream);
      if (this.#streams.get(streamId) === stream) {
        this.#streams.delete(streamId);
        this.#owners.delete(streamId);
      }
      this.memoryTrim.streamClosed();
    });
    return stream;
  }

  /**
   * Whether a watched stream's slate may run: always once it has had a publisher (capacity admitted
   * it); a stream only waiting viewers made takes one of maxWaitingSlates while watched. Without
   * one its viewers see nothing until the publisher's first frame (the slate is a courtesy; the
   * encode it costs is what a keyless viewer could otherwise multiply).
   */
  #slateAllowed(stream: LiveStream, watched: boolean): boolean {
    if (!watched || stream.everPublished) {
      this.#waitingSlates.delete(stream);
      return watched;
    }
    if (this.#waitingSlates.has(stream)) return true;
    if (this.#waitingSlates.size >= this.settings.maxWaitingSlates) return false;
    this.#waitingSlates.add(stream);
    return true;
  }

  /** Streams that never had a publisher whose slate runs now (at most maxWaitingSlates). */
  get waitingSlateCount(): number {
    return this.#waitingSlates.size;
  }

  getStream(streamId: string): LiveStream | undefined {
    return this.#streams.get(streamId);
  }

  /** Every stream this node holds (for metrics and the registry). */
  streams(): LiveStream[] {
    return [...this.#streams.values()];
  }

  /**
   * Hands a stream a change to apply on the first frame captured at or after `applyAt` (see
   * LiveStream.scheduleParams); its `landed` event names the frame. False when the stream is not
   * here: the caller then applies it as a plain update (kept for the stream's creation).
   */
  scheduleParams(streamId: string, s: ScheduledParams): boolean {
    const stream = this.#streams.get(streamId);
    if (!stream || stream.state === 'closed') return false;
    stream.scheduleParams(s);
    return true;
  }

  /** Drops a change waiting on a stream of this node; false when none waits by that id. */
  cancelScheduled(streamId: string, id: string): boolean {
    return this.#streams.get(streamId)?.cancelScheduled(id) ?? false;
  }

  /**
   * Hands a planned change (the API's, ParamsChange) to a stream on this node and returns the plan
   * its processor ran (null when no processor runs yet: see LiveStream.updateParams). Null as a
   * whole when the stream is not here: the change is kept and applied when it is made (a publisher
   * whose grant was read before it). `storedAt`: see LiveStream.updateParams.
   */
  updateParams(streamId: string, change: ParamsChange, storedAt?: number): { plan: UpdatePlan | null } | null {
    const stream = this.#streams.get(streamId);
    if (stream) return { plan: stream.updateParams(change, storedAt).plan };
    const now = Date.now();
    for (const [id, e] of this.#early) if (now - e.atMs > EARLY_UPDATE_TTL_MS || this.#early.size >= EARLY_UPDATES_MAX) this.#early.delete(id);
    const prev = this.#early.get(streamId);
    // Each change carries the full params: the newest wins (an unversioned one is the newest).
    if (prev && storedAt !== undefined && prev.storedAt !== undefined && storedAt < prev.storedAt) return null;
    this.#early.delete(streamId);
    this.#early.set(streamId, { change, storedAt, atMs: now });
    return null;
  }

  #takeEarly(streamId: string): { change: ParamsChange; storedAt: number | undefined } | null {
    const e = this.#early.get(streamId);
    this.#early.delete(streamId);
    return e && Date.now() - e.atMs <= EARLY_UPDATE_TTL_MS ? e : null;
  }

  status(streamId: string): LiveStreamStatus | null {
    return this.#streams.get(streamId)?.status() ?? null;
  }

  /**
   * Writes the newest `seconds` of the stream's output to `out` as an MP4 (whole segments cut at
   * keyframes, remuxed without re-encoding); null when the node holds no output of it.
   */
  async clip(streamId: string, seconds: number, out: string): Promise<ClipResult | null> {
    const source = this.#streams.get(streamId)?.readers.find(HlsOutput)?.clip(seconds);
    if (!source) return null;
    const { size } = await writeClipMp4(source, { out, ffmpegPath: this.settings.ffmpegPath });
    return { durationMs: Math.round(source.durationMs), size, startedAtMs: source.startedAtMs };
  }

  /**
   * Turns recording of a held stream's output on or off now (a stream not held here takes the
   * stored setting with its next publisher); false when not held or recording is unavailable.
   */
  setRecording(streamId: string, on: boolean): boolean {
    const stream = this.#streams.get(streamId);
    if (!stream || stream.state === 'closed') return false;
    return stream.readers.find(HlsOutput)?.setRecording(on) ?? false;
  }

  /**
   * Sets (null: clears) the song mixed into a held stream's output audio, once its take is read
   * (a stream not held here takes the stored one with its next publisher); false when not held.
   * Rejects when the take cannot be read.
   */
  async setSoundtrack(streamId: string, spec: SoundtrackSpec | null): Promise<boolean> {
    const stream = this.#streams.get(streamId);
    if (!stream || stream.state === 'closed') return false;
    await stream.setSoundtrack(spec, (s) => this.#readTake(s));
    return true;
  }

  /** The take's PCM from the shared blob store (`songs/<songId>/<take>.wav`). */
  async #readTake(spec: SoundtrackSpec): Promise<Int16Array> {
    const dir = this.#opts.songsDir;
    if (!dir) throw new InvalidStateError('this media node has no songs folder');
    const prefix = 'songs/';
    const rel = spec.wavKey.startsWith(prefix) ? spec.wavKey.slice(prefix.length) : '';
    if (!/^[\w-]+\/[12]\.wav$/.test(rel)) throw new InvalidStateError(`not a take's WAV key [wavKey:${spec.wavKey}]`);
    return takePcm(await readFile(join(dir, rel)));
  }

  /** Sets a stream's extra RTMP destinations live (enabled ones push while a publisher is attached); false when not held here. */
  setRtmpDestinations(streamId: string, dests: RtmpDestination[]): boolean {
    const stream = this.#streams.get(streamId);
    const rtmp = stream?.readers.find(RtmpOutputs);
    if (!rtmp) return false;
    rtmp.setDestinations(dests);
    return true;
  }

  /** Ends the stream (publisher and viewers); `ended` fires with reason `deleted` if it was live. */
  endStream(streamId: string): boolean {
    this.#early.delete(streamId);
    const stream = this.#streams.get(streamId);
    if (!stream) return false;
    stream.close('deleted');
    return true;
  }

  /** Session URL path for a session id. */
  sessionPath(sessionId: string): string {
    return `/live/sessions/${sessionId}`;
  }

  sessionUrl(sessionId: string): string {
    return `${this.#opts.publicUrl.replace(/\/+$/, '')}${this.sessionPath(sessionId)}`;
  }

  getSession(sessionId: string): SessionEntry | undefined {
    return this.#sessions.get(sessionId);
  }

  /** True when the node gathers on a loopback address (tests, local development): loopback candidates are then fine. */
  get servesLoopback(): boolean {
    return (this.#opts.iceAddresses ?? []).some((a) => a.startsWith('127.') || a === '::1');
  }

  /** Streams with a publisher attached: what capacity counts. */
  get activeStreamCount(): number {
    let n = 0;
    for (const s of this.#streams.values()) if (s.publisher) n++;
    return n;
  }

  /**
   * Validates the offer and attaches a publisher. Throws MediaError (with httpStatus) on bad offers
   * and, with 503, when the node is at capacity (a publisher replacing the one of a stream already
   * live here always may). `outputs.rtmpUrl` and `outputs.rtmpDestinations`: push the output there
   * while this publisher is live. `key`: the stream key the publisher presented; the session's
   * PATCH and DELETE must present it again.
   */
  async publish(
    streamId: string,
    params: LiveParams,
    sdp: string,
    outputs: { rtmpUrl?: string | undefined; rtmpDestinations?: RtmpDestination[] | undefined; record?: boolean | undefined; soundtrack?: SoundtrackSpec | null | undefined } = {},
    paramsStoredAt?: number,
    key = '',
  ): Promise<{ sessionId: string; answer: string; etag: string }> {
    const offer = this.#prepare(sdp, 'whip');
    if (!this.#streams.get(streamId)?.publisher && this.activeStreamCount >= this.capacity) {
      this.#logger.warn(`publish() | refused: at capacity [streamId:${streamId}] [capacity:${this.capacity}]`);
      throw new MediaError('OVERLOADED', 'this media node is at capacity; try again shortly', { retryAfterS: 10 });
    }
    const made = !this.#streams.has(streamId);
    const stream = this.createStream(streamId, params);
    // A stream a viewer made, or one made just now with updates that overtook the grant: the
    // grant's params apply unless the stream already holds newer ones.
    stream.grant(params, paramsStoredAt);
    const rtmp = stream.readers.find(RtmpOutputs);
    rtmp?.setPrimary(outputs.rtmpUrl);
    rtmp?.setDestinations(outputs.rtmpDestinations ?? []);
    stream.readers.find(HlsOutput)?.setRecording(outputs.record === true);
    // Read while the publisher connects; the outputs carry the take once it is in memory.
    stream.setSoundtrack(outputs.soundtrack ?? null, (s) => this.#readTake(s)).catch((err: unknown) => {
      this.#logger.warn({ err }, `publish() | soundtrack not played [streamId:${streamId}]`);
    });
    const sessionId = randomBytes(16).toString('hex');
    let attached: Awaited<ReturnType<LiveStream['attachPublisher']>>;
    try {
      attached = await stream.attachPublisher(offer, sessionId);
    } catch (err) {
      // An offer the WebRTC stack refused: a stream made for it goes with it (no slot, no idle wait).
      if (made) this.#disposeIfUnused(stream);
      throw err;
    }
    const { session, answer } = attached;
    this.#sessions.set(sessionId, { kind: 'whip', session, trickled: 0, keyDigest: sessionKeyDigest(key) });
    session.once('close', () => this.#sessions.delete(sessionId));
    return { sessionId, answer, etag: session.etag };
  }

  /**
   * Validates the offer and adds a viewer (held until the publisher's first keyframe if not live).
   *
   * A viewer never takes one of the node's `capacity` slots: capacity counts streams with a
   * publisher, and viewers waiting for a stream that has not had one here (playback ids are
   * public) are bounded per stream (maxWaitingViewersPerStream) and per owning account
   * (maxWaitingStreamsPerAccount) instead, 429 + Retry-After beyond either; so are a client's
   * sessions still connecting (maxPendingViewersPerAddress). A stream made for waiting viewers
   * goes as soon as its last viewer does (left, refused, or not connected in connectTimeoutMs).
   */
  async play(streamId: string, sdp: string, client: ClientInfo = { address: '' }, accountId?: string, relay?: { origin: string }): Promise<{ sessionId: string; answer: string; etag: string }> {
    const offer = this.#prepare(sdp, 'whep');
    if (relay) return this.#playEdge(streamId, offer, client, relay.origin);
    const done = this.#admitViewer(streamId, client);
    const held = this.#streams.get(streamId);
    const owner = (held ? this.#owners.get(streamId) : undefined) ?? accountId ?? streamId;
    let stream: LiveStream | undefined;
    try {
      // A stream that had a publisher here was admitted by capacity; one whose publisher is away for
      // a moment keeps taking its viewers as before. An edge's pull waits like any viewer.
      if (!held?.publisher && !held?.everPublished) this.#admitWaiting(streamId, held, owner);
      stream = this.createStream(streamId);
      if (!this.#owners.has(streamId)) this.#owners.set(streamId, owner);
      const made = stream;
      const whep = stream.readers.find(WhepOutput);
      if (!whep) throw new InvalidStateError(`stream closed [streamId:${streamId}]`);
      return await this.#addViewer(whep, offer, client, done, () => this.#disposeIfUnused(made));
    } catch (err) {
      done();
      if (stream) this.#disposeIfUnused(stream);
      throw err;
    }
  }

  /**
   * A viewer of a stream another node holds (decision 0030): it joins this node's relay of it,
   * which pulls the stream from `originUrl` (its WHEP endpoint there) with its first viewer. The
   * relay carries the origin's H.264 as is: a viewer must take H.264.
   */
  async #playEdge(streamId: string, offer: PreparedOffer, client: ClientInfo, originUrl: string): Promise<{ sessionId: string; answer: string; etag: string }> {
    if (offer.video && offer.video.codec !== 'H264') throw new MediaError('UNSUPPORTED_OFFER', 'this node relays the stream from another node as H.264: offer H.264, or play it from the api entry point');
    const done = this.#admitViewer(streamId, client);
    let edge = this.#edges.get(streamId);
    try {
      if (!edge || edge.closed || edge.origin !== originUrl) {
        edge?.close('closed');
        edge = this.#edge(streamId, originUrl);
      }
      await edge.pull();
      // The relay itself ends after its last viewer left (EdgeStream's linger).
      return await this.#addViewer(edge.whep, offer, client, done, () => undefined);
    } catch (err) {
      done();
      // Its first viewer failed: nothing else would close it.
      if (edge && !edge.readers.holds) edge.close('idle');
      throw err;
    }
  }

  /** Makes this node's relay of a stream another node holds. */
  #edge(streamId: string, originUrl: string): EdgeStream {
    const secret = this.#opts.forwardedSecret;
    const edge = new EdgeStream({
      streamId,
      origin: {
        url: originUrl,
        // Marks the request as forwarded (the origin's router serves it there, never re-places it)
        // and, signed, as this edge's pull.
        headers: { [FORWARDED_HEADER]: '1', ...(secret ? { [EDGE_HEADER]: edgePullFor(this.#opts.publicUrl, secret) } : {}) },
      },
      settings: this.settings,
      transport: this.#transport(),
      logger: this.#logger.child({ streamId, edge: true }),
    });
    this.#edges.set(streamId, edge);
    edge.once('close', () => {
      if (this.#edges.get(streamId) === edge) this.#edges.delete(streamId);
    });
    return edge;
  }

  /**
   * Counts a viewer's request against the per-client and per-node bounds (429 / 503 beyond them);
   * returns the call that releases its per-address slot once it connected or went. An edge's pull
   * is one session for the edge's viewers, admitted there: no per-address bound applies.
   */
  #admitViewer(streamId: string, client: ClientInfo): () => void {
    const pending = client.edge === undefined ? (this.#pendingViewers.get(client.address) ?? []) : null;
    if (pending && pending.length >= this.settings.maxPendingViewersPerAddress) {
      // A slot frees when one of them connects, or when the oldest misses its connect deadline at the latest.
      const retryAfterS = Math.max(1, Math.ceil(((pending[0] ?? 0) + this.settings.connectTimeoutMs - performance.now()) / 1000));
      this.#logger.warn(`play() | refused: viewers still connecting per address [limit:${this.settings.maxPendingViewersPerAddress}] [retryAfterS:${retryAfterS}]`);
      throw new MediaError('RATE_LIMITED', 'too many viewer sessions from this address are still connecting; finish or close them first', { retryAfterS });
    }
    if (this.connectedViewerCount >= this.settings.maxViewersPerNode) {
      this.#logger.warn(`play() | refused: node viewer limit [streamId:${streamId}] [limit:${this.settings.maxViewersPerNode}]`);
      throw new MediaError('OVERLOADED', `this media node carries its maximum of ${this.settings.maxViewersPerNode} viewers; try again later`, { retryAfterS: 30 });
    }
    if (!pending) return () => undefined;
    // Counted from now until it connects or goes: a client cannot hold sockets and slots with
    // offers it never completes (reserved before the answer, so parallel POSTs count too).
    const admittedAt = performance.now();
    this.#pendingViewers.set(client.address, [...pending, admittedAt]);
    let counted = true;
    return () => {
      if (!counted) return;
      counted = false;
      const left = this.#pendingViewers.get(client.address) ?? [];
      left.splice(left.indexOf(admittedAt), 1);
      if (left.length === 0) this.#pendingViewers.delete(client.address);
    };
  }

  /** Adds the viewer to `whep` and tracks its session; `done` releases its admission, `gone` runs after it closed. */
  async #addViewer(whep: WhepOutput, offer: PreparedOffer, client: ClientInfo, done: () => void, gone: () => void): Promise<{ sessionId: string; answer: string; etag: string }> {
    const sessionId = randomBytes(16).toString('hex');
    const { session, answer } = await whep.addViewer(offer, sessionId, { edge: client.edge });
    this.#sessions.set(sessionId, { kind: 'whep', session, trickled: 0 });
    if (session.connected) done();
    session.once('connected', () => {
      done();
      // Many admitted at once can connect past the node's limit: the late ones go (as past the stream's).
      if (this.connectedViewerCount > this.settings.maxViewersPerNode) {
        this.#logger.warn(`play() | closed a viewer that connected past the node's limit [streamId:${whep.streamId}]`);
        session.close('closed');
      }
    });
    session.once('close', () => {
      done();
      this.#sessions.delete(sessionId);
      gone();
    });
    return { sessionId, answer, etag: session.etag };
  }

  /**
   * 429 + Retry-After when a viewer of a stream that has not had a publisher here would pass the
   * bounds of waiting viewers: per stream, and per owner the streams that have waiting viewers.
   */
  #admitWaiting(streamId: string, held: LiveStream | undefined, owner: string): void {
    const s = this.settings;
    const viewers = (st: LiveStream): number => st.readers.find(WhepOutput)?.viewerCount ?? 0;
    if (held && viewers(held) >= s.maxWaitingViewersPerStream) {
      this.#logger.warn(`play() | refused: waiting viewers per stream [streamId:${streamId}] [limit:${s.maxWaitingViewersPerStream}]`);
      throw new MediaError('RATE_LIMITED', `this stream is not live and already has ${s.maxWaitingViewersPerStream} viewers waiting for it; try again when it is live`, { retryAfterS: 30 });
    }
    if (held && viewers(held) > 0) return;
    let waiting = 0;
    for (const [id, st] of this.#streams) if (id !== streamId && !st.everPublished && viewers(st) > 0 && this.#owners.get(id) === owner) waiting++;
    if (waiting >= s.maxWaitingStreamsPerAccount) {
      this.#logger.warn(`play() | refused: waiting streams per owner [streamId:${streamId}] [owner:${owner}] [limit:${s.maxWaitingStreamsPerAccount}]`);
      throw new MediaError('RATE_LIMITED', `viewers already wait for ${s.maxWaitingStreamsPerAccount} streams of this account that are not live; try again when this stream is live`, { retryAfterS: 30 });
    }
  }

  /** Closes a stream that only waiting viewers made once none is left (it never had a publisher; nothing else uses it). */
  #disposeIfUnused(stream: LiveStream): void {
    if (stream.state === 'closed' || stream.publisher || stream.everPublished || stream.readers.holds || stream.outputConsumed) return;
    stream.close('closed');
  }

  #prepare(sdp: string, role: 'whip' | 'whep'): PreparedOffer {
    if (this.#closed) throw new InvalidStateError('media node closed');
    return prepareOffer(sdp, role, { maxBytes: this.settings.maxSdpBytes, maxLines: this.settings.maxSdpLines, allowLoopbackCandidates: this.servesLoopback });
  }

  /** Connected viewers of every stream here, relayed ones too: what maxViewersPerNode counts. */
  get connectedViewerCount(): number {
    let n = 0;
    for (const s of this.#streams.values()) n += s.readers.find(WhepOutput)?.connectedViewerCount ?? 0;
    for (const e of this.#edges.values()) n += e.whep.connectedViewerCount;
    return n;
  }

  /** WHEP sessions of every stream here, connected or still connecting (relayed ones too). */
  get viewerSessionCount(): number {
    let n = 0;
    for (const s of this.#streams.values()) n += s.readers.find(WhepOutput)?.viewerCount ?? 0;
    for (const e of this.#edges.values()) n += e.whep.viewerCount;
    return n;
  }

  /** What this node carries of each stream, as origin or edge (the registry's beat, /metrics). */
  audience(): Record<string, StreamAudience> {
    const out: Record<string, StreamAudience> = {};
    for (const [id, s] of this.#streams) {
      const whep = s.readers.find(WhepOutput);
      out[id] = { role: 'origin', viewers: whep?.connectedViewerCount ?? 0, sessions: whep?.viewerCount ?? 0, edges: whep?.edgeCount ?? 0 };
    }
    for (const [id, e] of this.#edges) out[id] ??= { role: 'edge', viewers: e.whep.connectedViewerCount, sessions: e.whep.viewerCount, edges: 0 };
    return out;
  }

  /** This node's relay of a stream another node holds (decision 0030), if it runs one. */
  edgeStatus(streamId: string): EdgeStreamStatus | null {
    return this.#edges.get(streamId)?.status() ?? null;
  }

    get streamCount(): number {
    return this.#streams.size;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** After close(): resolves when every recording the streams were writing is complete on disk. */
  recordingsEnded(): Promise<void> {
    return this.#ending;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const stream of [...this.#streams.values()]) {
      try {
        stream.close('closed');
      } catch (err) {
        this.#logger.warn({ err }, `close() | stream close failed [streamId:${stream.streamId}]`);
      }
    }
    for (const edge of [...this.#edges.values()]) edge.close('closed');
    this.#edges.clear();
    this.#ending = Promise.all([...this.#streams.values()].map((s) => s.readers.ended())).then(() => undefined);
    this.#streams.clear();
    this.#sessions.clear();
    this.#early.clear();
    this.#pendingViewers.clear();
    this.memoryTrim.close();
    this.#releaseEgress();
  }
}

/**
 * The media node: owns this process's live streams and their WHIP/WHEP sessions, and serves the
 * WHIP/WHEP HTTP endpoints as a fastify plugin (`registerRoutes`). The control plane decides who
 * may publish or play (resolveIngest/resolvePlayback) and listens for `started`/`live`/`ended`.
 *
 * Tree: MediaNode → LiveStream (createStream) → WhipSession, WhepSession, DecoderBin, EncoderBin, Vp8EncoderBin.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { RTCIceServer } from 'werift';
import { InvalidStateError } from './errors.ts';
import { defaultProcessorFactory, type FrameProcessorFactory, type StreamParams } from './FrameProcessor.ts';
import { LiveStream, type EndedInfo, type LiveInfo, type LiveStreamStatus, type StartedInfo } from './LiveStream.ts';
import { DEFAULT_MEDIA_SETTINGS, type MediaSettings } from './settings.ts';
import { prepareOffer, type PreparedOffer } from './Sdp.ts';
import { TypedEmitter } from './TypedEmitter.ts';
import type { WhepSession } from './WhepSession.ts';
import { hlsRoutes } from './HlsRoutes.ts';
import { whipWhepRoutes } from './WhipWhepRoutes.ts';
import type { WhipSession } from './WhipSession.ts';

/** A publisher that may go live. */
export interface IngestGrant {
  streamId: string;
  params: StreamParams;
  outputRtmpUrl?: string | undefined;
}

/** A publisher with a valid key that may not go live now; `reason` is shown to the streamer. */
export interface IngestRefusal {
  refused: string;
}

export interface MediaNodeOptions {
  /** Base URL clients reach this node at (e.g. https://media1.example.com); Location headers use it. */
  publicUrl: string;
  /** Host-candidate addresses to advertise (default: every interface). */
  iceAddresses?: string[];
  /** Inclusive UDP port range for ICE. */
  udpPortRange?: [number, number];
  /** STUN/TURN servers, sent to clients as `Link: <…>; rel="ice-server"`. */
  iceServers?: RTCIceServer[];
  logger: Logger;
  /**
   * Checks a publisher's Bearer token; null → 401, a refusal → 402 with its reason (the account
   * may not stream now: its monthly streaming allowance is used up). `outputRtmpUrl` (the stream's
   * output_rtmp_url, optional) makes the node push the output there over RTMP while this
   * publisher is live.
   */
  resolveIngest(streamId: string, bearerToken: string): Promise<IngestGrant | IngestRefusal | null>;
  /** Maps a playback id to its stream; null → 404. */
  resolvePlayback(playbackId: string): Promise<{ streamId: string } | null>;
  /** Builds each stream's frame processor (default: native image chains, no diffusion). */
  createProcessor?: FrameProcessorFactory;
  /** Tuning knobs (defaults in settings.ts). */
  settings?: Partial<MediaSettings>;
}

export type MediaNodeEvents = {
  started: [StartedInfo];
  live: [LiveInfo];
  ended: [EndedInfo];
};

/** A session as the HTTP layer sees it. */
export type SessionEntry = { kind: 'whip'; session: WhipSession; stream: LiveStream } | { kind: 'whep'; session: WhepSession; stream: LiveStream };

export class MediaNode extends TypedEmitter<MediaNodeEvents> {
  readonly settings: MediaSettings;
  readonly #opts: MediaNodeOptions;
  readonly #logger: Logger;
  readonly #streams = new Map<string, LiveStream>();
  readonly #sessions = new Map<string, SessionEntry>();
  #closed = false;

  constructor(opts: MediaNodeOptions) {
    const logger = opts.logger.child({ module: 'media' });
    super(logger);
    this.#opts = opts;
    this.#logger = logger;
    this.settings = { ...DEFAULT_MEDIA_SETTINGS, ...opts.settings };
  }

  get options(): Readonly<MediaNodeOptions> {
    return this.#opts;
  }

  /** Registers the WHIP/WHEP endpoints (an encapsulated plugin with its own SDP body parsers) and the HLS endpoints. */
  registerRoutes(app: FastifyInstance): void {
    void app.register(whipWhepRoutes, { node: this });
    if (this.settings.hlsEnabled) void app.register(hlsRoutes, { node: this });
  }

  /** Returns the stream, creating it (idle, no pipelines yet) if needed. */
  createStream(streamId: string, params: StreamParams = {}): LiveStream {
    if (this.#closed) throw new InvalidStateError('media node closed');
    const existing = this.#streams.get(streamId);
    if (existing) return existing;
    const stream = new LiveStream({
      streamId,
      params,
      settings: this.settings,
      transport: { iceAddresses: this.#opts.iceAddresses, udpPortRange: this.#opts.udpPortRange, iceServers: this.#opts.iceServers },
      createProcessor: this.#opts.createProcessor ?? defaultProcessorFactory,
      logger: this.#logger.child({ streamId }),
    });
    this.#streams.set(streamId, stream);
    stream.on('started', (info) => this.safeEmit('started', info));
    stream.on('live', (info) => this.safeEmit('live', info));
    stream.on('ended', (info) => this.safeEmit('ended', info));
    stream.on('idle', () => stream.close('closed'));
    stream.once('close', () => {
      if (this.#streams.get(streamId) === stream) this.#streams.delete(streamId);
    });
    return stream;
  }

  getStream(streamId: string): LiveStream | undefined {
    return this.#streams.get(streamId);
  }

  /** Every stream this node holds (for metrics and the registry). */
  streams(): LiveStream[] {
    return [...this.#streams.values()];
  }

  /** Hot-applies params to a stream on this node; false if the stream is not here. */
  updateParams(streamId: string, params: StreamParams): boolean {
    const stream = this.#streams.get(streamId);
    if (!stream) return false;
    stream.updateParams(params);
    return true;
  }

  status(streamId: string): LiveStreamStatus | null {
    return this.#streams.get(streamId)?.status() ?? null;
  }

  /** Ends the stream (publisher and viewers); `ended` fires with reason `deleted` if it was live. */
  endStream(streamId: string): boolean {
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

  /**
   * Validates the offer and attaches a publisher. Throws MediaError (with httpStatus) on bad offers.
   * `outputs.rtmpUrl`: push the output there while this publisher is live (undefined: no push).
   */
  async publish(streamId: string, params: StreamParams, sdp: string, outputs: { rtmpUrl?: string | undefined } = {}): Promise<{ sessionId: string; answer: string; etag: string }> {
    const offer = this.#prepare(sdp, 'whip');
    const stream = this.createStream(streamId, params);
    stream.updateParams(params);
    stream.setRtmpOutput(outputs.rtmpUrl);
    const sessionId = randomBytes(16).toString('hex');
    const { session, answer } = await stream.attachPublisher(offer, sessionId);
    this.#sessions.set(sessionId, { kind: 'whip', session, stream });
    session.once('close', () => this.#sessions.delete(sessionId));
    return { sessionId, answer, etag: session.etag };
  }

  /** Validates the offer and adds a viewer (held until the publisher's first keyframe if not live). */
  async play(streamId: string, sdp: string): Promise<{ sessionId: string; answer: string; etag: string }> {
    const offer = this.#prepare(sdp, 'whep');
    const stream = this.createStream(streamId);
    const sessionId = randomBytes(16).toString('hex');
    const { session, answer } = await stream.addViewer(offer, sessionId);
    this.#sessions.set(sessionId, { kind: 'whep', session, stream });
    session.once('close', () => this.#sessions.delete(sessionId));
    return { sessionId, answer, etag: session.etag };
  }

  #prepare(sdp: string, role: 'whip' | 'whep'): PreparedOffer {
    if (this.#closed) throw new InvalidStateError('media node closed');
    return prepareOffer(sdp, role, { maxBytes: this.settings.maxSdpBytes, maxLines: this.settings.maxSdpLines });
  }

  get streamCount(): number {
    return this.#streams.size;
  }

  get closed(): boolean {
    return this.#closed;
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
    this.#streams.clear();
    this.#sessions.clear();
  }
}

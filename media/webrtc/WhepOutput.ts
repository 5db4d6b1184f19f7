/**
 * A stream's WHEP viewers as a reader of its hub: the ViewerSet (sessions, one packetization per
 * codec, the viewers' sound held for its picture) and the VP8 branch for viewers without H.264.
 *
 *   H.264 AUs ─► ViewerSet (H.264 viewers)
 *   frames ─► Vp8Branch (only while VP8 viewers exist) ─► ViewerSet (VP8 viewers)
 *   Opus RTP (the publisher's, or the soundtrack's mix) ─► ViewerSet (every viewer that takes audio)
 *
 * Viewers may join before the publisher: they are answered at once and start on the first
 * keyframe once video flows (docs/obs.md, "Before the publisher is live").
 */
import type { Logger } from 'pino';
import { InvalidStateError } from '../errors.ts';
import type { Frame } from '../Frame.ts';
import type { EncodedAccessUnit } from '../gst/EncoderBin.ts';
import { NAL_AUD, nalType } from '../H264Nal.ts';
import type { MediaSettings } from '../settings.ts';
import type { ReaderContext, ReaderStatus, StreamReader } from '../StreamReader.ts';
import type { VideoCodec } from '../VideoCodec.ts';
import type { TransportOptions } from './PeerTransport.ts';
import type { PreparedOffer } from './Sdp.ts';
import { OUTPUT_PT, ViewerSet } from './ViewerSet.ts';
import { Vp8Branch, type Vp8BranchStatus } from './Vp8Branch.ts';
import type { WhepSession } from './WhepSession.ts';

export interface WhepOutputOptions {
  settings: MediaSettings;
  transport: TransportOptions;
  logger: Logger;
}

export interface WhepOutputStats {
  /** WHEP viewers, all codecs, connected or not. */
  viewers: number;
  /** Viewers that completed ICE and DTLS (what maxViewersPerStream counts). */
  connected: number;
  /** Of those, edge nodes' pulls (decision 0030): each carries that node's viewers. */
  edges: number;
  /** Viewers by the video codec they are sent (sums to `viewers`). */
  viewersByCodec: Record<VideoCodec, number>;
  /** How long viewers' sound waits for the picture of its moment now, ms (ViewerAudio; 0 without a picture). */
  viewerAudioHoldMs: number;
  vp8: Vp8BranchStatus;
  /** H.264 viewers by the rendition they are sent now (`full` = the full encode). */
  viewersByRendition: Record<string, number>;
  /** The first 50 adaptive viewers' links: rendition, estimate, loss, probe, moves. */
  bandwidth: ReturnType<ViewerSet['bandwidths']>;
}

export class WhepOutput implements StreamReader {
  readonly name = 'whep';
  readonly #ctx: ReaderContext;
  readonly #logger: Logger;
  readonly #settings: MediaSettings;
  readonly #viewers: ViewerSet;
  /** The VP8 output: its encoder exists only while VP8 viewers do (and frames flow). */
  readonly #vp8: Vp8Branch;
  /** Sessions that are edge nodes' pulls (decision 0030), connected or not. */
  readonly #edges = new Set<WhepSession>();
  #closed = false;

  constructor(ctx: ReaderContext, opts: WhepOutputOptions) {
    this.#ctx = ctx;
    this.#logger = opts.logger;
    this.#settings = opts.settings;
    this.#viewers = new ViewerSet({ streamId: ctx.streamId, settings: opts.settings, transport: opts.transport, rtpTimestamp: ctx.rtpTimestamp, logger: opts.logger });
    this.#vp8 = new Vp8Branch({
      streamId: ctx.streamId,
      settings: opts.settings,
      ssrc: this.#viewers.ssrcs.vp8,
      payloadType: OUTPUT_PT,
      // Same 90 kHz clock as the H.264 output, so audio/video sync is the same for both codecs.
      rtpTimestamp: ctx.rtpTimestamp,
      viewers: () => this.#viewers.count('VP8'),
      onPackets: (packets, keyframe) => this.#viewers.fanOut('VP8', packets, keyframe),
      onError: (message) => ctx.error(message),
      logger: opts.logger,
    });
  }

  /** Some viewer completed ICE and DTLS: the slate runs for it. */
  get watched(): boolean {
    return this.#viewers.connected() > 0;
  }

  /** A viewer session, connected or still connecting, keeps the stream from idling. */
  get holds(): boolean {
    return this.#viewers.size > 0;
  }

  /**
   * Viewers move between the renditions as their links allow (ViewerBandwidth): the renditions run
   * while the stream has a viewer that may move, so that a link that narrows finds the smaller one
   * running. Started only when a viewer's link called for one, a viewer that joined on a thin link
   * waited on the full encode for the rendition's first key frame, and in 3 of 5 lab runs at
   * 600 kb/s the link's queue and the retransmissions behind it never recovered (0–8.5 fps, 7–48 %
   * lost; docs/performance.md, "Real networks", has the runs with the renditions running).
   */
  get wantsRenditions(): boolean {
    return this.#settings.renditions.length > 0 && this.#viewers.hasAdaptive();
  }

  /** With a soundtrack, the mix is encoded to Opus only while some viewer takes audio. */
  get wantsOpus(): boolean {
    return this.#viewers.audioViewers() > 0;
  }

  get streamId(): string {
    return this.#ctx.streamId;
  }

  /** Connected sessions that are edge nodes' pulls (each carries that node's viewers). */
  get edgeCount(): number {
    let n = 0;
    for (const s of this.#edges) if (s.connected) n++;
    return n;
  }

  /** Viewers, all codecs, connected or not. */
  get viewerCount(): number {
    return this.#viewers.size;
  }

  /** Viewers that completed ICE and DTLS: what maxViewersPerStream and the node's maxViewersPerNode count. */
  get connectedViewerCount(): number {
    return this.#viewers.connected();
  }

  video(au: EncodedAccessUnit): void {
    this.rendition('', au);
  }

  /** One access unit of rendition `name` ('' = the full encode) to the H.264 viewers. */
  rendition(name: string, au: EncodedAccessUnit): void {
    // Access unit delimiters are not needed over RTP.
    const nals = au.nals.filter((n) => nalType(n) !== NAL_AUD);
    this.#viewers.sendH264(nals, this.#ctx.rtpTimestamp(au.ptsMs), au.keyframe, name);
  }

  frame(frame: Frame, ptsMs: number): void {
    this.#vp8.push(frame, ptsMs);
  }

  opus(rtp: Buffer, encoderDelayMs: number): void {
    this.#viewers.sendAudio(rtp, encoderDelayMs);
  }

  /** Unwatched, the VP8 encoder stops with the frames; the next publisher restarts it if VP8 viewers remain. */
  publisherLeft(watched: boolean): void {
    if (!watched) this.#vp8.stop('publisher left');
  }

  /** Asks the encoder a viewer of `codec` is fed from for a key unit. */
  #requestKeyUnit(codec: VideoCodec): void {
    if (codec === 'VP8') this.#vp8.encoder?.requestKeyUnit();
    else this.#ctx.requestKeyUnit();
  }

  /**
   * Adds a viewer and returns it with its answer. 503-class MediaError when the stream has
   * maxViewersPerStream connected viewers, or maxPendingViewersPerStream still connecting: only
   * viewers that completed ICE and DTLS hold a slot, so offers that never connect cannot lock
   * real viewers out. A viewer that connects past the cap (a race of many at once) is closed.
   */
  async addViewer(offer: PreparedOffer, sessionId: string, opts: { edge?: string | undefined } = {}): Promise<{ session: WhepSession; answer: string }> {
    if (this.#closed) throw new InvalidStateError(`stream closed [streamId:${this.#ctx.streamId}]`);
    // An edge's pull carries that node's viewers: always the full encode.
    const session = this.#viewers.create(offer, sessionId, { adaptive: opts.edge === undefined });
    if (opts.edge !== undefined) {
      // An edge node's pull: one session that carries that node's viewers of this stream.
      this.#edges.add(session);
      session.once('close', () => this.#edges.delete(session));
    }
    session.on('connected', () => {
      if (this.#viewers.connected() > this.#settings.maxViewersPerStream) {
        this.#logger.warn(`addViewer() | closed a viewer that connected past the limit [streamId:${this.#ctx.streamId}]`);
        session.close('closed');
        return;
      }
      this.#requestKeyUnit(session.codec);
      this.#ctx.requestSourceKeyframe();
    });
    session.on('keyframeRequest', () => this.#requestKeyUnit(session.codec));
    // Renditions share the stream encoder's key frames: one request brings the move.
    session.on('renditionWanted', () => this.#ctx.requestKeyUnit());
    session.once('close', () => {
      if (session.codec === 'VP8' && this.#viewers.count('VP8') === 0) this.#vp8.viewersGone();
      this.#ctx.changed();
    });
    // It holds the stream now, and a soundtrack's mix is encoded for it if it takes audio.
    this.#ctx.changed();
    try {
      return { session, answer: await session.answer() };
    } catch (err) {
      session.close('failed');
      throw err;
    }
  }

  stats(): WhepOutputStats {
    return {
      viewers: this.#viewers.size,
      connected: this.#viewers.connected(),
      edges: this.edgeCount,
      viewersByCodec: { H264: this.#viewers.count('H264'), VP8: this.#viewers.count('VP8') },
      viewerAudioHoldMs: this.#viewers.audioHoldMs,
      vp8: this.#vp8.status(),
      viewersByRendition: this.#viewers.byRendition(),
      bandwidth: this.#viewers.bandwidths(50),
    };
  }

  status(): ReaderStatus {
    const connected = this.#viewers.connected();
    return { kind: 'whep', watched: connected > 0, consumers: connected };
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#viewers.closeAll();
    } finally {
      this.#vp8.close();
    }
  }
}

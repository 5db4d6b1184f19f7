/**
 * One viewer's WHEP session: a werift peer connection with a sendonly video track of one codec
 * (H.264, or VP8 for viewers without H.264) and Opus when the viewer offered audio. It never
 * encodes: the stream's encoder for that codec is packetized once and the same RTP bytes are
 * handed to every viewer of the codec; werift's sender rewrites SSRC, payload type and
 * sequence/timestamp offsets per viewer.
 *
 * A viewer is fed from the first keyframe after it connects (the stream forces one when it
 * joins), and its PLI/FIR become a rate-limited forced key unit on its codec's shared encoder.
 */
import type { Logger } from 'pino';
import { RtcpPayloadSpecificFeedback, type RTCPeerConnection, type RTCRtpSender } from 'werift';
import { answerWithAllCandidates, createPeerConnection, type TransportOptions } from './PeerTransport.ts';
import type { PreparedOffer, VideoCodec } from './Sdp.ts';
import type { MediaSettings } from './settings.ts';
import { TypedEmitter } from './TypedEmitter.ts';
import type { SessionCloseReason } from './WhipSession.ts';

export type WhepSessionEvents = {
  /** ICE+DTLS connected: the stream should force a key unit so this viewer can start. */
  connected: [];
  /** The viewer sent PLI or FIR. */
  keyframeRequest: [];
  close: [SessionCloseReason];
};

export interface WhepSessionOptions {
  id: string;
  streamId: string;
  offer: PreparedOffer;
  transport: TransportOptions;
  settings: MediaSettings;
  logger: Logger;
}

export class WhepSession extends TypedEmitter<WhepSessionEvents> {
  readonly id: string;
  readonly streamId: string;
  readonly etag: string;
  /** The video codec this viewer is sent (chosen from its offer by Sdp.prepareOffer). */
  readonly codec: VideoCodec;
  readonly #opts: WhepSessionOptions;
  readonly #pc: RTCPeerConnection;
  readonly #logger: Logger;
  readonly #video: RTCRtpSender;
  readonly #audio: RTCRtpSender | undefined;
  #closed = false;
  #connected = false;
  #waitingKeyframe = true;
  #timer: NodeJS.Timeout | undefined;
  videoPacketsSent = 0;
  keyframeRequests = 0;

  constructor(opts: WhepSessionOptions) {
    super(opts.logger);
    this.id = opts.id;
    this.streamId = opts.streamId;
    this.etag = `"${opts.id.slice(0, 16)}"`;
    // An offer without video (audio-only viewer) gets no video packets; H264 is only its bucket.
    this.codec = opts.offer.video?.codec ?? 'H264';
    this.#opts = opts;
    this.#logger = opts.logger;
    this.#pc = createPeerConnection('whep', opts.transport);
    // Transceivers made before the offer is applied are matched to its m-lines by kind.
    this.#video = this.#pc.addTransceiver('video', { direction: 'sendonly' }).sender;
    this.#audio = opts.offer.audio ? this.#pc.addTransceiver('audio', { direction: 'sendonly' }).sender : undefined;
    this.#video.onPictureLossIndication.subscribe(() => this.#onKeyframeRequest());
    this.#video.onRtcp.subscribe((packet) => {
      // FIR (RFC 5104 §4.3.1, FMT 4); werift does not export its FullIntraRequest class.
      if (packet instanceof RtcpPayloadSpecificFeedback && packet.feedback.count === 4) this.#onKeyframeRequest();
    });
    this.#pc.connectionStateChange.subscribe((state) => {
      if (state === 'connected' && !this.#connected) {
        this.#connected = true;
        clearTimeout(this.#timer);
        this.#logger.info(`connected() | viewer connected [sessionId:${this.id}] [streamId:${this.streamId}]`);
        this.safeEmit('connected');
      } else if (state === 'failed' || state === 'closed') {
        this.close(state === 'failed' ? 'failed' : 'closed');
      }
    });
    // A viewer that never completes ICE/DTLS costs one socket and a timer, then goes.
    this.#timer = setTimeout(() => {
      if (!this.#connected) this.close('timeout');
    }, opts.settings.connectTimeoutMs);
  }

  async answer(): Promise<string> {
    return answerWithAllCandidates(this.#pc, this.#opts.offer.sdp, this.#opts.transport, this.#opts.settings.connectTimeoutMs);
  }

  async addCandidates(candidates: { candidate: string; mid: string | undefined }[]): Promise<void> {
    for (const c of candidates) {
      await this.#pc.addIceCandidate({ candidate: c.candidate, sdpMid: c.mid ?? '0' });
    }
  }

  get remoteIceUfrag(): string {
    return this.#opts.offer.iceUfrag;
  }

  #onKeyframeRequest(): void {
    this.keyframeRequests++;
    this.safeEmit('keyframeRequest');
  }

  get connected(): boolean {
    return this.#connected;
  }

  /** True until this viewer has been sent a keyframe. */
  get waitingKeyframe(): boolean {
    return this.#waitingKeyframe;
  }

  /** Sends one encoded frame's packets (of this.codec); skipped until connected and until a keyframe starts the feed. */
  sendAccessUnit(packets: readonly Buffer[], keyframe: boolean): void {
    if (this.#closed || !this.#connected) return;
    if (this.#waitingKeyframe) {
      if (!keyframe) return;
      this.#waitingKeyframe = false;
    }
    for (const p of packets) {
      this.videoPacketsSent++;
      // sendRtp deserializes the bytes into a fresh packet, so viewers never share header objects.
      this.#video.sendRtp(p).catch((err: unknown) => this.#logger.debug({ err }, 'sendAccessUnit() | sendRtp failed'));
    }
  }

  sendAudio(rtp: Buffer): void {
    if (this.#closed || !this.#connected || !this.#audio) return;
    this.#audio.sendRtp(rtp).catch((err: unknown) => this.#logger.debug({ err }, 'sendAudio() | sendRtp failed'));
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(reason: SessionCloseReason = 'closed'): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#pc.close().catch((err: unknown) => this.#logger.warn({ err }, 'close() | pc.close failed'));
    this.#logger.info(`close() | viewer session closed [sessionId:${this.id}] [reason:${reason}]`);
    this.safeEmit('close', reason);
  }
}

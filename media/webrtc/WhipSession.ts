/**
 * One publisher's WHIP session: a werift peer connection that receives one video track (VP8 or
 * H.264) and optionally one Opus track.
 *
 * Video RTP goes through a reorder window (ReorderBuffer: in-order packets pass at once, a gap
 * waits for the retransmission our NACK asks for, as long as two round trips of retries take:
 * from `jitterLatencyMs` up to `jitterMaxLatencyMs`), then through our
 * depacketizer (H264Depacketizer / Vp8Depacketizer), and whole frames are handed on, starting at
 * the first key frame; damaged frames are dropped there. After a loss (a packet the reorder window
 * gave up on, a damaged frame) frames are held back again until the next key frame: the frames
 * that follow reference what was lost, and decoded they are garbage that every output carried until
 * the publisher's next key frame (seconds of smeared blocks on a loaded node that lost packets,
 * since Chromium sends key frames only when asked). The outputs hold the last good picture meanwhile
 * (the slate after `slateAfterMs`). We send PLI ourselves (werift never does): on the first packet,
 * after each loss or dropped frame, and every `pliMinIntervalMs` while frames wait for a key frame.
 * OBS ignores PLI, so its keyframe interval bounds start-up and recovery.
 *
 * NACKs are ours too (NackGenerator; werift's own are turned off, decision 0021): each gap once
 * it is a loss and not reordering, again each round trip, a bounded number of times and within a
 * share of the stream's bitrate. The round trip comes from ICE's checks and from our NACKs' answers.
 *
 * Liveness: the session closes when no RTP arrives for `ingestTimeoutMs` (a publisher that
 * vanished without DELETE), when ICE/DTLS fails (werift runs RFC 7675 consent checks), or when it
 * does not connect within `connectTimeoutMs`.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { GenericNack, PictureLossIndication, RtcpPayloadSpecificFeedback, RtcpTransportLayerFeedback, type RTCPeerConnection, type RTCRtpReceiver, type RtpPacket } from 'werift';
import { InvalidStateError } from '../errors.ts';
import { NackGenerator } from './NackGenerator.ts';
import { answerWithAllCandidates, createPeerConnection, disableWeriftNacks, iceRoundTrip, offerWithAllCandidates, type TransportOptions } from './PeerTransport.ts';
import { H264Depacketizer, type DepacketizedFrame } from './H264Depacketizer.ts';
import { ReorderBuffer } from './ReorderBuffer.ts';
import { prepareOffer, type PreparedOffer } from './Sdp.ts';
import type { MediaSettings } from '../settings.ts';
import { TypedEmitter } from '../TypedEmitter.ts';
import { Vp8Depacketizer } from './Vp8Depacketizer.ts';

/** Why a session closed. */
export type SessionCloseReason =
  /** The client sent DELETE. */
  | 'deleted'
  /** No RTP for ingestTimeoutMs, or ICE/DTLS never connected in time. */
  | 'timeout'
  /** ICE consent or DTLS failed. */
  | 'failed'
  /** A new publisher took over the stream. */
  | 'replaced'
  /** The stream or node was closed. */
  | 'closed';

export type WhipSessionEvents = {
  /** ICE+DTLS connected. */
  connected: [];
  close: [SessionCloseReason];
};

/** Ingest counters for the status endpoint. */
export interface IngestStats {
  codec: string;
  /**
   * Bytes on the wire from the publisher and to it (SRTP/SRTCP as sent: RTP with its SRTP tag,
   * and our receiver reports, NACK and PLI feedback), from the DTLS transport like the WebRTC
   * `transport` stats. 0 until the transport is up.
   */
  bytesReceived: number;
  bytesSent: number;
  videoPackets: number;
  audioPackets: number;
  /**
   * Video packets the link lost: gaps that outlasted the reorder window (not reordering), before
   * any retransmission repaired them. What the publisher's network does.
   */
  packetsLost: number;
  /** Of those, the ones a retransmission brought back in time. */
  packetsRecovered: number;
  /** Video packets given up by the reorder window (no retransmission in time): what the decoder missed. */
  packetsUnrecovered: number;
  /** Sequence numbers our NACKs asked for (one per number per NACK). */
  nackRequests: number;
  /** ms the reorder window waits for a gap now (sized by the round trip). */
  reorderWaitMs: number;
  /** Whole frames handed to the decoder. */
  framesIn: number;
  /** Frames dropped as damaged (loss inside a frame, malformed packets). */
  framesDropped: number;
  /** Seconds (inter-arrival jitter from werift's receiver stats). */
  jitter: number | undefined;
  /** Seconds: the round trip measured by ICE's checks and our NACKs' answers; undefined before one. */
  rtt: number | undefined;
  pliSent: number;
  keyframes: number;
  lastPacketAtMs: number | undefined;
}

export interface WhipSessionOptions {
  id: string;
  streamId: string;
  offer: PreparedOffer;
  transport: TransportOptions;
  settings: MediaSettings;
  logger: Logger;
  /** Whole video frames (H.264 Annex B access units or VP8 frames), starting at a key frame. */
  onVideoFrame: (frame: DepacketizedFrame) => void;
  /** Opus RTP as received (serialized), for pass-through to viewers. */
  onAudioRtp: (rtp: Buffer) => void;
}

/** RTP fixed header, bytes: what a packet costs beyond its payload (the bitrate share counts both). */
const RTP_HEADER_BYTES = 12;
/** Sequence numbers per NACK packet at most: ≤ 400 bytes of feedback in one datagram. */
const NACK_SEQS_PER_PACKET = 100;
/** ms added to the reorder wait for the publisher's send queue and our timers. */
const REORDER_WAIT_MARGIN_MS = 10;

export class WhipSession extends TypedEmitter<WhipSessionEvents> {
  readonly id: string;
  readonly streamId: string;
  readonly codec: 'VP8' | 'H264';
  readonly payloadType: number;
  /** RTP payload type of the publisher's Opus; undefined when the offer has no audio. */
  readonly audioPayloadType: number | undefined;
  /** Strong entity tag of the ICE session (RFC 9725 §4.3.1). */
  readonly etag: string;
  readonly createdAtMs = Date.now();
  readonly #opts: WhipSessionOptions;
  readonly #pc: RTCPeerConnection;
  readonly #logger: Logger;
  readonly #reorder: ReorderBuffer<RtpPacket>;
  readonly #depacketizer: H264Depacketizer | Vp8Depacketizer;
  #closed = false;
  #connected = false;
  #videoSsrc: number | undefined;
  /** A key frame came since the first packet and since the last loss: frames are handed on. */
  #sawKeyframe = false;
  #lastPliMs = -Infinity;
  #timers: NodeJS.Timeout[] = [];
  #watchdog: NodeJS.Timeout | undefined;
  /** Counters kept here; the byte counts come from the transport in stats(). */
  #stats: Omit<IngestStats, 'bytesReceived' | 'bytesSent' | 'packetsLost' | 'packetsRecovered' | 'nackRequests' | 'reorderWaitMs' | 'rtt'>;
  #receiverStats: { jitter?: number } = {};
  readonly #nack: NackGenerator;
  /** The video receiver NACKs go out through (found at the first packet). */
  #videoReceiver: RTCRtpReceiver | undefined;
  #nackTimer: NodeJS.Timeout | undefined;
  /** performance.now() the NACK timer fires at. */
  #nackTimerAtMs = Infinity;
  /** ICE round-trip measurements already taken in. */
  #iceRttSamples = 0;
  /** An edge's pull of a stream from its origin (we offered), not a publisher. */
  readonly #pulling: boolean;

  /**
   * An edge's pull of a stream from its origin node (decision 0030): the same receiving session as
   * a publisher's (reorder window, our NACKs and PLI, liveness), but it makes the offer (recvonly
   * H.264 + Opus) and `accept`s the origin's answer to its WHEP request.
   */
  static async pull(opts: Omit<WhipSessionOptions, 'offer'>): Promise<{ session: WhipSession; offer: string }> {
    const pc = createPeerConnection('pull', opts.transport);
    let offer: string;
    try {
      offer = await offerWithAllCandidates(pc, opts.transport, opts.settings.connectTimeoutMs);
    } catch (err) {
      await pc.close().catch(() => undefined);
      throw err;
    }
    // Our own offer, read as the origin will: the payload types it sends us are the ones in it.
    const prepared = prepareOffer(offer, 'whep', { maxBytes: opts.settings.maxSdpBytes, maxLines: opts.settings.maxSdpLines, allowLoopbackCandidates: true });
    return { session: new WhipSession({ ...opts, offer: prepared }, pc), offer };
  }

  /** `pc`: a connection that already made its offer (pull); otherwise one is made to answer `opts.offer`. */
  constructor(opts: WhipSessionOptions, pc?: RTCPeerConnection) {
    super(opts.logger);
    const video = opts.offer.video;
    if (!video) throw new InvalidStateError('WHIP offer without video');
    this.id = opts.id;
    this.streamId = opts.streamId;
    this.codec = video.codec;
    this.payloadType = video.payloadType;
    this.audioPayloadType = opts.offer.audio?.payloadType;
    this.etag = `"${randomBytes(8).toString('hex')}"`;
    this.#opts = opts;
    this.#logger = opts.logger;
    this.#stats = {
      codec: video.codec,
      framesIn: 0,
      framesDropped: 0,
      videoPackets: 0,
      audioPackets: 0,
      packetsUnrecovered: 0,
      jitter: undefined,
      pliSent: 0,
      keyframes: 0,
      lastPacketAtMs: undefined,
    };
    this.#reorder = new ReorderBuffer<RtpPacket>({ latencyMs: opts.settings.jitterLatencyMs });
    this.#nack = new NackGenerator({ maxRetries: opts.settings.nackMaxRetries, maxBitrateShare: opts.settings.nackMaxBitrateShare });
    this.#depacketizer = video.codec === 'VP8' ? new Vp8Depacketizer() : new H264Depacketizer();
    this.#pc = pc ?? createPeerConnection('whip', opts.transport);
    this.#pulling = pc !== undefined;
    this.#pc.onTrack.subscribe((track) => {
      if (track.kind === 'video') {
        track.onReceiveRtp.subscribe((rtp) => this.#onVideo(rtp));
      } else {
        track.onReceiveRtp.subscribe((rtp) => {
          this.#stats.audioPackets++;
          this.#touch();
          opts.onAudioRtp(rtp.serialize());
        });
      }
    });
    this.#pc.connectionStateChange.subscribe((state) => {
      if (state === 'connected' && !this.#connected) {
        this.#connected = true;
        this.#logger.info(`connected() | publisher connected [sessionId:${this.id}] [codec:${this.codec}]`);
        this.safeEmit('connected');
      } else if (state === 'failed' || state === 'closed') {
        this.close(state === 'failed' ? 'failed' : 'closed');
      }
    });
    this.#timers.push(
      setTimeout(() => {
        if (!this.#connected) this.close('timeout');
      }, opts.settings.connectTimeoutMs),
    );
  }

  /** Answers the offer with every server candidate (non-trickle). */
  async answer(): Promise<string> {
    const answer = await answerWithAllCandidates(this.#pc, this.#opts.offer.sdp, this.#opts.transport, this.#opts.settings.connectTimeoutMs);
    // The receivers exist once the offer is applied; no RTP comes before DTLS, after the answer.
    disableWeriftNacks(this.#pc);
    return answer;
  }

  /** Applies the origin's answer to a pull's offer (see `pull`). */
  async accept(answer: string): Promise<void> {
    await this.#pc.setRemoteDescription({ type: 'answer', sdp: answer });
    disableWeriftNacks(this.#pc);
  }

  /** Applies trickled candidates from a PATCH (RFC 8840 sdpfrag). */
  async addCandidates(candidates: { candidate: string; mid: string | undefined }[]): Promise<void> {
    for (const c of candidates) {
      await this.#pc.addIceCandidate({ candidate: c.candidate, sdpMid: c.mid ?? '0' });
    }
  }

  get remoteIceUfrag(): string {
    return this.#opts.offer.iceUfrag;
  }

  get connected(): boolean {
    return this.#connected;
  }

  #touch(): void {
    // One clock read per packet; the watchdog below checks it (re-arming a timer per packet cost
    // ~200 timer operations a second per stream).
    this.#stats.lastPacketAtMs = Date.now();
    if (this.#watchdog) return;
    const timeout = this.#opts.settings.ingestTimeoutMs;
    this.#watchdog = setInterval(() => {
      if (Date.now() - (this.#stats.lastPacketAtMs ?? 0) >= timeout) this.close('timeout');
    }, Math.max(50, Math.floor(timeout / 4)));
  }

  #onVideo(rtp: RtpPacket): void {
    if (this.#closed) return;
    this.#stats.videoPackets++;
    this.#touch();
    if (this.#videoSsrc === undefined) {
      this.#videoSsrc = rtp.header.ssrc;
      this.#videoReceiver = this.#pc.getTransceivers().find((t) => t.kind === 'video')?.receiver;
      this.requestKeyframe('start');
    }
    const now = performance.now();
    const seq = rtp.header.sequenceNumber;
    this.#takeIceRtt();
    this.#nack.push(seq, rtp.payload.length + RTP_HEADER_BYTES, now);
    this.#reorder.latencyMs = this.#reorderWaitMs(now);
    const { packets, lost } = this.#reorder.push(seq, rtp, now);
    if (lost > 0) {
      this.#stats.packetsUnrecovered += lost;
      // The window stopped waiting for them: asking again would only cost the publisher.
      const next = this.#reorder.next;
      if (next !== null) this.#nack.forgetBefore(next);
      this.#awaitKeyframe();
    }
    for (const p of packets) this.#forward(p);
    this.#sendNacks(now);
  }

  /** Takes in ICE's latest round-trip measurement (its connectivity check, then one per consent check). */
  #takeIceRtt(): void {
    const ice = iceRoundTrip(this.#pc);
    if (!ice || ice.samples === this.#iceRttSamples) return;
    this.#iceRttSamples = ice.samples;
    this.#nack.addRttSample(ice.rttMs);
  }

  /**
   * ms a gap may hold the packets after it: the reorder window, then two NACKs a retry interval
   * apart (the first retransmission may be lost too), and a margin for the publisher's send queue;
   * from jitterLatencyMs up to jitterMaxLatencyMs.
   */
  #reorderWaitMs(now: number): number {
    const s = this.#opts.settings;
    const wait = this.#nack.reorderMs(now) + 2 * this.#nack.retryIntervalMs + REORDER_WAIT_MARGIN_MS;
    return Math.min(s.jitterMaxLatencyMs, Math.max(s.jitterLatencyMs, wait));
  }

  /** Sends the NACKs due now, and sets the timer for the next ones. */
  #sendNacks(now: number): void {
    const seqs = this.#nack.poll(now);
    const receiver = this.#videoReceiver;
    if (seqs.length > 0 && receiver && this.#videoSsrc !== undefined) {
      // A few hundred bytes per RTCP packet at most, whatever a burst of loss asks for.
      for (let i = 0; i < seqs.length; i += NACK_SEQS_PER_PACKET) {
        const nack = new GenericNack({ senderSsrc: receiver.rtcpSsrc, mediaSourceSsrc: this.#videoSsrc, lost: seqs.slice(i, i + NACK_SEQS_PER_PACKET) });
        receiver.dtlsTransport.sendRtcp([new RtcpTransportLayerFeedback({ feedback: nack })]).catch((err: unknown) => {
          this.#logger.debug({ err }, 'sendNacks() | NACK send failed');
        });
      }
    }
    const due = this.#nack.nextDueMs(now);
    if (due === Infinity || due >= this.#nackTimerAtMs) return;
    clearTimeout(this.#nackTimer);
    this.#nackTimerAtMs = due;
    this.#nackTimer = setTimeout(
      () => {
        this.#nackTimer = undefined;
        this.#nackTimerAtMs = Infinity;
        if (!this.#closed) this.#sendNacks(performance.now());
      },
      Math.max(1, Math.ceil(due - now)),
    );
  }

  #forward(rtp: RtpPacket): void {
    const h = rtp.header;
    const { frame, dropped } = this.#depacketizer.push({ sequenceNumber: h.sequenceNumber, timestamp: h.timestamp, marker: h.marker, payload: rtp.payload });
    if (dropped) {
      this.#stats.framesDropped++;
      this.#awaitKeyframe();
    }
    if (!frame) return;
    if (frame.keyframe) this.#stats.keyframes++;
    if (!this.#sawKeyframe) {
      if (!frame.keyframe) {
        this.requestKeyframe('waiting');
        return;
      }
      this.#sawKeyframe = true;
    }
    this.#stats.framesIn++;
    this.#opts.onVideoFrame(frame);
  }

  /** A loss: frames that may reference what was lost wait for a key frame (one is asked for now). */
  #awaitKeyframe(): void {
    this.#sawKeyframe = false;
    this.requestKeyframe('loss');
  }

  /** Sends PLI to the publisher, at most every pliMinIntervalMs. */
  requestKeyframe(why: 'start' | 'loss' | 'waiting' | 'decoder'): void {
    const now = performance.now();
    if (this.#closed || this.#videoSsrc === undefined || now - this.#lastPliMs < this.#opts.settings.pliMinIntervalMs) return;
    this.#lastPliMs = now;
    const transceiver = this.#pc.getTransceivers().find((t) => t.kind === 'video');
    if (!transceiver) return;
    const pli = new RtcpPayloadSpecificFeedback({
      feedback: new PictureLossIndication({ senderSsrc: transceiver.receiver.rtcpSsrc, mediaSsrc: this.#videoSsrc }),
    });
    this.#stats.pliSent++;
    this.#logger.debug(`requestKeyframe() | PLI [sessionId:${this.id}] [why:${why}]`);
    transceiver.receiver.dtlsTransport.sendRtcp([pli]).catch((err: unknown) => {
      this.#logger.debug({ err }, 'requestKeyframe() | PLI send failed');
    });
  }

  /** Refreshes jitter/RTT from werift's receiver stats (cheap; called by the stream's stats tick). */
  async refreshStats(): Promise<void> {
    if (this.#closed) return;
    const transceiver = this.#pc.getTransceivers().find((t) => t.kind === 'video');
    if (!transceiver) return;
    const report = await transceiver.receiver.getStats();
    for (const s of report.values() as Iterable<Record<string, unknown>>) {
      if (s['type'] === 'inbound-rtp' && typeof s['jitter'] === 'number') this.#receiverStats.jitter = s['jitter'];
    }
  }

  stats(): IngestStats {
    let bytesReceived = 0;
    let bytesSent = 0;
    for (const d of this.#pc.dtlsTransports) {
      bytesReceived += d.bytesReceived;
      bytesSent += d.bytesSent;
    }
    const n = this.#nack;
    return {
      ...this.#stats,
      bytesReceived,
      bytesSent,
      packetsLost: n.lost,
      packetsRecovered: n.recovered,
      nackRequests: n.requests,
      reorderWaitMs: Math.round(this.#reorder.latencyMs),
      jitter: this.#receiverStats.jitter,
      rtt: n.rttMeasured ? n.rttMs / 1000 : undefined,
    };
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(reason: SessionCloseReason = 'closed'): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const t of this.#timers) clearTimeout(t);
    clearInterval(this.#watchdog);
    clearTimeout(this.#nackTimer);
    this.#pc.close().catch((err: unknown) => this.#logger.warn({ err }, 'close() | pc.close failed'));
    const st = this.#stats;
    // What the session carried, for the log reader: a stream that never went live shows why here.
    this.#logger.info(
      `close() | ${this.#pulling ? 'pull' : 'publisher'} session closed [sessionId:${this.id}] [reason:${reason}] [packets:${st.videoPackets}] [lost:${this.#nack.lost}] ` +
        `[recovered:${this.#nack.recovered}] [unrecovered:${st.packetsUnrecovered}] [nackRequests:${this.#nack.requests}] ` +
        `[framesIn:${st.framesIn}] [framesDropped:${st.framesDropped}] [keyframes:${st.keyframes}] [pliSent:${st.pliSent}]`,
    );
    this.safeEmit('close', reason);
  }
}

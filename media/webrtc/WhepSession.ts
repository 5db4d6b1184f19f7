/**
 * One viewer's WHEP session, on libdatachannel (node-datachannel): a peer connection answering
 * the viewer's recvonly offer with a sendonly video track of one codec (H.264, or VP8 for viewers
 * without H.264) and Opus when the viewer offered audio. It never encodes: the stream packetizes
 * each encoded frame once and hands the same RTP bytes to every viewer of that codec (the
 * stream's SSRC and sequence numbers; only the payload type is the viewer's own). An H.264 viewer
 * moves between the stream's renditions as its RTCP says its link allows (ViewerBandwidth), its
 * sequence continued across the move (decision 0031). SRTP, UDP and
 * retransmissions for NACKs happen in libdatachannel's C++, about 6× cheaper per viewer than in
 * JavaScript (decision 0007); ICE is libjuice, host candidates on the configured addresses and
 * ports, plus the announced addresses.
 *
 * A viewer is fed from the first keyframe after it connects (the stream forces one when it
 * joins), and its PLI/FIR become a rate-limited forced key unit on its codec's shared encoder.
 */
import { randomBytes } from 'node:crypto';
import nodeDataChannel, { type PeerConnection, type Track } from 'node-datachannel';
import type { Logger } from 'pino';
import { InvalidStateError } from '../errors.ts';
import { offerRefused, type TransportOptions } from './PeerTransport.ts';
import { readRtcpFeedback, type RtcpFeedback } from './RtcpFeedback.ts';
import { ViewerBandwidth, type Rung, type ViewerBandwidthStatus } from './ViewerBandwidth.ts';
import { rewriteAnswerCandidates, type PreparedOffer, type VideoCodec } from './Sdp.ts';
import { SENDER_REPORT_INTERVAL_MS, senderReport, type ReportedTime, type SenderClock } from './SenderReport.ts';
import type { MediaSettings } from '../settings.ts';
import { TypedEmitter } from '../TypedEmitter.ts';
import type { SessionCloseReason } from './WhipSession.ts';

const { PeerConnection: NdcPeerConnection, Video, Audio, RtcpNackResponder } = nodeDataChannel;

export type WhepSessionEvents = {
  /** ICE+DTLS connected: the stream should force a key unit so this viewer can start. */
  connected: [];
  /** The viewer sent PLI or FIR. */
  keyframeRequest: [];
  /** Its link calls for another rendition: it moves at that rendition's next key frame (ask for one). */
  renditionWanted: [string];
  close: [SessionCloseReason];
};

/** SSRCs of what every viewer of a stream is sent (the stream's packetizers use them). */
export interface OutputSsrcs {
  video: number;
  audio: number;
}

export interface WhepSessionOptions {
  id: string;
  streamId: string;
  offer: PreparedOffer;
  transport: TransportOptions;
  settings: MediaSettings;
  ssrcs: OutputSsrcs;
  /** Where each output's RTP time stands against capture time (the stream's; for sender reports). */
  clock: SenderClock;
  /**
   * The renditions this viewer may move between, best first (ViewerBandwidth); absent: the full
   * encode only (VP8 viewers, edges' pulls, nodes without renditions).
   */
  ladder?: readonly Rung[];
  /** Whether a rendition's access units flow now ('' = the full encode): a viewer leaves its rendition only for one that does. */
  flowing?: (rendition: string) => boolean;
  logger: Logger;
}

/** CNAME of every output (our SDP's a=ssrc lines say the same): a viewer syncs the tracks of one CNAME. */
const CNAME = 'reverie';

/** RTP's fixed header, bytes (our packets carry no CSRCs or extensions): a sender report counts payload octets. */
const RTP_HEADER = 12;

/** Packets of sent video the NACK responder keeps for retransmission (≈ 2 s at 1.5 Mb/s). */
const NACK_BUFFER_PACKETS = 512;

/** Padding of one probe packet, bytes: RTP's padding count is one octet (RFC 3550 §5.1). */
const PADDING_BYTES = 255;
/** Probe packets go out in bursts this far apart, ms. */
const PROBE_TICK_MS = 20;

/** True if a compound RTCP packet holds a PLI (PSFB FMT 1) or FIR (PSFB FMT 4). */
export function asksForKeyframe(rtcp: Buffer): boolean {
  for (let i = 0; i + 4 <= rtcp.length; ) {
    const fmt = (rtcp[i] as number) & 0x1f;
    const pt = rtcp[i + 1] as number;
    const words = rtcp.readUInt16BE(i + 2);
    if (pt === 206 && (fmt === 1 || fmt === 4)) return true;
    i += (words + 1) * 4;
  }
  return false;
}

export class WhepSession extends TypedEmitter<WhepSessionEvents> {
  readonly id: string;
  readonly streamId: string;
  readonly etag: string;
  /** The video codec this viewer is sent (chosen from its offer by Sdp.prepareOffer). */
  readonly codec: VideoCodec;
  /** Payload types this viewer negotiated (packets are rewritten to them when they differ). */
  readonly videoPayloadType: number;
  readonly audioPayloadType: number | undefined;
  readonly #opts: WhepSessionOptions;
  readonly #pc: PeerConnection;
  readonly #logger: Logger;
  readonly #video: Track | null;
  readonly #audio: Track | null;
  #closed = false;
  #connected = false;
  #waitingKeyframe = true;
  #timer: NodeJS.Timeout | undefined;
  #answer: Promise<string> | null = null;
  videoPacketsSent = 0;
  videoOctetsSent = 0;
  audioPacketsSent = 0;
  audioOctetsSent = 0;
  keyframeRequests = 0;
  /** The last sender report of each track: what its RTP time stood for (tests, status). */
  readonly lastReports: { video: ReportedTime | null; audio: ReportedTime | null } = { video: null, audio: null };
  #videoReportAt = -Infinity;
  #audioReportAt = -Infinity;
  /** Which rendition its link carries (null: the full encode only). */
  readonly #bw: ViewerBandwidth | null;
  /** The rendition it is sent now ('' = the full encode). */
  #rendition = '';
  /** Added to the sequence numbers of what it is sent (16 bits): its sequence runs on across renditions. */
  #seqOffset = 0;
  /** The last video sequence number and RTP time it was sent (null before any). */
  #lastSeq: number | null = null;
  #lastTs = 0;
  #probeTimer: NodeJS.Timeout | undefined;
  /** Probe bytes owed (a probe slower than a packet per tick sends one every few ticks). */
  #probeCredit = 0;
  probePacketsSent = 0;
  /** Bytes of probe packets sent (not in the sender reports' counts: they carry no media). */
  #probeOctets = 0;
  /** Video octets sent (media and probes) at the start of the current rate window, and when it started. */
  #rateMark = { at: performance.now(), octets: 0 };
  #sentBps = 0;

  constructor(opts: WhepSessionOptions) {
    super(opts.logger);
    this.id = opts.id;
    this.streamId = opts.streamId;
    this.etag = `"${opts.id.slice(0, 16)}"`;
    // An offer without video (audio-only viewer) gets no video packets; H264 is only its bucket.
    this.codec = opts.offer.video?.codec ?? 'H264';
    this.videoPayloadType = opts.offer.video?.payloadType ?? 96;
    this.audioPayloadType = opts.offer.audio?.payloadType;
    this.#opts = opts;
    this.#logger = opts.logger;
    this.#bw = opts.ladder && opts.ladder.length > 1 && this.codec === 'H264' ? new ViewerBandwidth(opts.ladder) : null;
    const t = opts.transport;
    const bindAddress = t.iceAddresses?.find((a) => !a.includes(':'));
    this.#pc = new NdcPeerConnection(`whep-${opts.id.slice(0, 8)}`, {
      iceServers: [],
      ...(bindAddress ? { bindAddress } : {}),
      ...(t.udpPortRange ? { portRangeBegin: t.udpPortRange[0], portRangeEnd: t.udpPortRange[1] } : {}),
    });
    // Our send tracks carry the offer's mids, so the answer pairs them with the viewer's m-lines.
    try {
      this.#video = opts.offer.video ? this.#addVideo(opts.offer, opts.ssrcs.video) : null;
      this.#audio = opts.offer.audio ? this.#addAudio(opts.offer, opts.ssrcs.audio) : null;
    } catch (err) {
      // A mid or fmtp from the offer libdatachannel would not take: nothing of this viewer stays.
      this.#pc.close();
      throw offerRefused(err);
    }
    this.#pc.onStateChange((state) => {
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

  #addVideo(offer: PreparedOffer, ssrc: number): Track {
    const v = offer.video as NonNullable<PreparedOffer['video']>;
    const desc = new Video(offer.mids.video ?? '0', 'SendOnly');
    if (v.codec === 'VP8') desc.addVP8Codec(v.payloadType);
    else desc.addH264Codec(v.payloadType, v.fmtp || 'profile-level-id=42e01f;packetization-mode=1');
    desc.addSSRC(ssrc, CNAME, 'reverie', 'video');
    const track = this.#pc.addTrack(desc);
    // Retransmits what the viewer NACKs from a buffer of what we sent (C++, per viewer).
    track.setMediaHandler(new RtcpNackResponder(NACK_BUFFER_PACKETS));
    track.onMessage((rtcp) => {
      if (asksForKeyframe(rtcp)) this.#onKeyframeRequest();
      if (this.#bw) this.#onFeedback(readRtcpFeedback(rtcp, ssrc));
    });
    return releasable(track);
  }

  #addAudio(offer: PreparedOffer, ssrc: number): Track {
    const a = offer.audio as NonNullable<PreparedOffer['audio']>;
    const desc = new Audio(offer.mids.audio ?? '1', 'SendOnly');
    desc.addOpusCodec(a.payloadType);
    desc.addSSRC(ssrc, CNAME, 'reverie', 'audio');
    return releasable(this.#pc.addTrack(desc));
  }

  /** Answers the offer with every candidate (non-trickle, RFC 9725 §4.3.1). */
  answer(): Promise<string> {
    this.#answer ??= new Promise<string>((resolve, reject) => {
      if (this.#closed) return reject(new InvalidStateError('viewer session closed'));
      const timer = setTimeout(() => reject(new Error('ICE gathering did not complete')), this.#opts.settings.connectTimeoutMs);
      this.#pc.onGatheringStateChange((state) => {
        if (state !== 'complete') return;
        clearTimeout(timer);
        const sdp = this.#pc.localDescription()?.sdp;
        if (!sdp) return reject(new Error('no local description after gathering'));
        resolve(rewriteAnswerCandidates(sdp, { interfaces: this.#opts.transport.iceAddresses, announced: this.#opts.transport.announcedAddresses }));
      });
      try {
        this.#pc.setRemoteDescription(this.#opts.offer.sdp, 'offer');
      } catch (err) {
        clearTimeout(timer);
        // libdatachannel parses what Sdp.ts let through; what it still refuses is the offer's fault (400).
        reject(offerRefused(err));
      }
    });
    return this.#answer;
  }

  /** Applies trickled candidates from a PATCH (RFC 8840 sdpfrag). */
  async addCandidates(candidates: { candidate: string; mid: string | undefined }[]): Promise<void> {
    for (const c of candidates) this.#pc.addRemoteCandidate(c.candidate.startsWith('a=') ? c.candidate.slice(2) : c.candidate, c.mid ?? this.#opts.offer.mids.video ?? '0');
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

  /** The rendition it is sent now ('' = the full encode). */
  get rendition(): string {
    return this.#rendition;
  }

  /** It moves between renditions as its link allows (an H.264 viewer, not an edge's pull, on a node with renditions). */
  get adaptive(): boolean {
    return this.#bw !== null;
  }

  /** Its link as its RTCP tells it, and the rendition that follows (null: not adaptive). */
  bandwidth(): ViewerBandwidthStatus | null {
    return this.#bw?.status() ?? null;
  }

  /**
   * Sends one encoded frame's packets (of this.codec, already carrying this viewer's payload
   * type) of `rendition` ('' = the full encode); skipped until connected and until a keyframe
   * starts the feed. Of the renditions it is handed, it sends the one its link calls for, and
   * moves to another at that rendition's key frame: the one it leaves has a key frame of the same
   * picture just before (renditions share key frames), which is skipped so the viewer gets one
   * picture per timestamp; its sequence numbers run on across the move.
   */
  sendAccessUnit(packets: readonly Buffer[], keyframe: boolean, rendition = ''): void {
    if (this.#closed || !this.#connected || !this.#video) return;
    const wanted = this.#bw?.rendition ?? '';
    if (this.#waitingKeyframe) {
      if (!keyframe || rendition !== wanted) return;
      this.#waitingKeyframe = false;
      this.#startOn(rendition, packets[0]);
    } else if (rendition !== this.#rendition) {
      return;
    } else if (rendition !== wanted && keyframe && (this.#opts.flowing?.(wanted) ?? false)) {
      // The wanted rendition's key frame of this very picture comes next: the viewer starts on it
      // (or on the next key frame of whichever it wants by then). Nothing of this one was sent, so
      // its sequence runs on without a gap.
      this.#waitingKeyframe = true;
      return;
    }
    for (const p of packets) {
      const out = this.#seqOffset === 0 ? p : rewriteRtp(p, { seq: (p.readUInt16BE(2) + this.#seqOffset) & 0xffff });
      this.videoPacketsSent++;
      this.videoOctetsSent += out.length - RTP_HEADER;
      if (!sendOn(this.#video, out)) return;
      this.#lastSeq = out.readUInt16BE(2);
      this.#lastTs = out.readUInt32BE(4);
    }
    const now = performance.now();
    if (now - this.#videoReportAt >= SENDER_REPORT_INTERVAL_MS) {
      this.#videoReportAt = now;
      const time = { rtp: this.#opts.clock.video(now), ntpMs: performance.timeOrigin + now };
      this.lastReports.video = time;
      sendOn(this.#video, senderReport(this.#opts.ssrcs.video, time, this.videoPacketsSent, this.videoOctetsSent, CNAME));
    }
  }

  /** A rendition's place on its ladder (0 = the best). */
  #ladderIndex(rendition: string): number {
    return this.#opts.ladder?.findIndex((r) => r.name === rendition) ?? 0;
  }

  /** Starts (again) on `rendition` at its key frame whose first packet is `first`: the sequence runs on from the last one sent. */
  #startOn(rendition: string, first: Buffer | undefined): void {
    const from = this.#rendition;
    this.#rendition = rendition;
    if (first && this.#lastSeq !== null) this.#seqOffset = (this.#lastSeq + 1 - first.readUInt16BE(2)) & 0xffff;
    if (from !== rendition) this.#logger.info(`startOn() | viewer moved [sessionId:${this.id}] [from:${from || 'full'}] [to:${rendition || 'full'}] [estimateBps:${this.#bw?.status().estimateBps ?? 'none'}]`);
  }

  #onFeedback(fb: RtcpFeedback): void {
    const bw = this.#bw;
    if (!bw || this.#closed) return;
    const now = performance.now();
    if (now - this.#rateMark.at >= 1000) {
      const octets = this.videoOctetsSent + this.#probeOctets;
      this.#sentBps = ((octets - this.#rateMark.octets) * 8 * 1000) / (now - this.#rateMark.at);
      this.#rateMark = { at: now, octets };
    }
    const before = bw.rendition;
    if (bw.update(fb, this.#sentBps, now) && bw.rendition !== before) {
      // Moving down, the link is overrun now: the bigger encode stops at once (its queue drains
      // while the smaller one's key frame is on its way) rather than at its next key frame.
      if (this.#ladderIndex(bw.rendition) > this.#ladderIndex(this.#rendition) && (this.#opts.flowing?.(bw.rendition) ?? false)) this.#waitingKeyframe = true;
      this.safeEmit('renditionWanted', bw.rendition);
    }
    if (bw.probeBps > 0 && !this.#probeTimer) {
      this.#probeCredit = 0;
      this.#probeTimer = setInterval(() => this.#probe(), PROBE_TICK_MS);
      this.#logger.debug(`probe() | probing for the next rendition up [sessionId:${this.id}] [estimateBps:${bw.status().estimateBps}] [probeBps:${Math.round(bw.probeBps)}]`);
    } else if (bw.probeBps === 0 && this.#probeTimer) {
      clearInterval(this.#probeTimer);
      this.#probeTimer = undefined;
      this.#logger.debug(`probe() | probe ended [sessionId:${this.id}] [rendition:${bw.rendition || 'full'}] [estimateBps:${bw.status().estimateBps}] [fractionLost:${bw.status().fractionLost}]`);
    }
  }

  /**
   * A probe (ViewerBandwidth): padding-only RTP packets in its video sequence, at the RTP time of
   * the last frame sent; the receiver's bandwidth estimator counts them, its jitter buffer drops
   * them. (Copies of sent packets were tried instead: Chromium's estimate did not grow with them,
   * and the viewer froze while they were sent.)
   */
  #probe(): void {
    const rate = this.#bw?.probeBps ?? 0;
    if (this.#closed || !this.#video || rate <= 0 || this.#lastSeq === null) return;
    this.#probeCredit = Math.min(this.#probeCredit + (rate * PROBE_TICK_MS) / 1000 / 8, 64 * 1024);
    let last: number = this.#lastSeq;
    while (this.#probeCredit >= RTP_HEADER + PADDING_BYTES) {
      const seq = (last + 1) & 0xffff;
      const p = Buffer.alloc(RTP_HEADER + PADDING_BYTES);
      p[0] = 0xa0; // V=2, P=1
      p[1] = this.videoPayloadType & 0x7f;
      p.writeUInt16BE(seq, 2);
      p.writeUInt32BE(this.#lastTs >>> 0, 4);
      p.writeUInt32BE(this.#opts.ssrcs.video >>> 0, 8);
      p[p.length - 1] = PADDING_BYTES;
      if (!sendOn(this.#video, p)) return;
      this.#lastSeq = last = seq;
      // The media after it follows it in the sequence.
      this.#seqOffset = (this.#seqOffset + 1) & 0xffff;
      this.#probeCredit -= p.length;
      this.probePacketsSent++;
      this.#probeOctets += p.length;
    }
  }

  /** Sends one Opus RTP packet (already carrying this viewer's payload type and the output SSRC). */
  sendAudio(rtp: Buffer): void {
    if (this.#closed || !this.#connected || !this.#audio) return;
    this.audioPacketsSent++;
    this.audioOctetsSent += rtp.length - RTP_HEADER;
    if (!sendOn(this.#audio, rtp)) return;
    const now = performance.now();
    if (now - this.#audioReportAt < SENDER_REPORT_INTERVAL_MS) return;
    const rtpNow = this.#opts.clock.audio(now);
    if (rtpNow === null) return;
    this.#audioReportAt = now;
    const time = { rtp: rtpNow, ntpMs: performance.timeOrigin + now };
    this.lastReports.audio = time;
    sendOn(this.#audio, senderReport(this.#opts.ssrcs.audio, time, this.audioPacketsSent, this.audioOctetsSent, CNAME));
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(reason: SessionCloseReason = 'closed'): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    clearInterval(this.#probeTimer);
    try {
      // Closing a track drops its callbacks (onMessage holds this session); pc.close() does not.
      this.#video?.close();
      this.#audio?.close();
      this.#pc.close();
    } catch (err) {
      this.#logger.warn({ err }, 'close() | pc.close failed');
    }
    this.#logger.info(`close() | viewer session closed [sessionId:${this.id}] [reason:${reason}]`);
    this.safeEmit('close', reason);
  }
}

/**
 * A track whose native side we can let go of. node-datachannel holds each callback given to a
 * track (onMessage) until the track is closed, and forgets a track wrapper (its list of live
 * tracks) only once its onClosed callback has run: a wrapper collected before that leaves a
 * dangling entry that its global cleanup would touch. This onClosed callback holds the track
 * itself, so the wrapper outlives its close; it refers to nothing else (a function of its own
 * scope, not a closure beside the session's), so nothing of the session stays with it.
 */
/**
 * One packet on a track; false when it was not sent. libdatachannel closes a track on its own
 * thread (the viewer left, ICE failed) before the session hears of it, and a send then throws
 * "Track is closed": the packet is dropped and the session's close follows from its state event.
 * (Audio held for its picture, ViewerAudio, is sent from a timer, where the throw was uncaught and
 * ended the process: seen when a browser closed with WHEP viewers.)
 */
function sendOn(track: Track, packet: Buffer): boolean {
  try {
    track.sendMessageBinary(packet);
    return true;
  } catch {
    return false;
  }
}

/** A copy of an RTP packet with another payload type (marker bit kept), sequence number or SSRC. */
export function rewriteRtp(rtp: Buffer, to: { payloadType?: number; seq?: number; ssrc?: number }): Buffer {
  const out = Buffer.from(rtp);
  if (to.payloadType !== undefined) out[1] = ((out[1] as number) & 0x80) | (to.payloadType & 0x7f);
  if (to.seq !== undefined) out.writeUInt16BE(to.seq, 2);
  if (to.ssrc !== undefined) out.writeUInt32BE(to.ssrc >>> 0, 8);
  return out;
}

function releasable(track: Track): Track {
  track.onClosed(() => void track);
  return track;
}

let users = 0;

/**
 * libdatachannel keeps the process alive after its peer connections close, until its global
 * cleanup runs (the closed connections' callbacks are released only then). Media nodes hold it
 * while they exist; the last one to close releases it.
 */
export function holdWebRtcEgress(): () => void {
  users++;
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    if (--users === 0) nodeDataChannel.cleanup();
  };
}

/** A random SSRC (never 0). */
export function randomSsrc(): number {
  return randomBytes(4).readUInt32BE() || 1;
}

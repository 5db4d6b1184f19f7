/**
 * A stream's WHEP viewers and what they share: one SSRC per output (viewers differ only in payload
 * types, and in the rendition their link carries), the 90 kHz output clock, and one packetization
 * per codec and rendition. A frame's packets are made
 * once and rewritten once per payload type in use (viewers negotiate their own numbers; most
 * browsers share one), so N viewers cost N sends, not N packetizations.
 *
 * It also holds the viewer caps: only viewers that completed ICE and DTLS hold a slot of
 * maxViewersPerStream, so offers that never connect cannot lock real viewers out.
 */
import type { Logger } from 'pino';
import { MediaError } from '../errors.ts';
import { H264Packetizer } from './H264Packetizer.ts';
import type { TransportOptions } from './PeerTransport.ts';
import { rtpDelta } from './RtpArrival.ts';
import type { PreparedOffer, VideoCodec } from './Sdp.ts';
import type { SenderClock } from './SenderReport.ts';
import type { MediaSettings } from '../settings.ts';
import { RtpSequence } from './RtpSequence.ts';
import { ViewerAudio } from './ViewerAudio.ts';
import type { Rung, ViewerBandwidthStatus } from './ViewerBandwidth.ts';
import { randomSsrc, rewriteRtp, WhepSession } from './WhepSession.ts';

/** What a viewer's Opus needs on the wire, bit/s (Opus at its usual 32–64 kb/s with RTP framing): part of each rendition's need. */
const VIEWER_AUDIO_BPS = 40_000;

/** Payload type our packetizers write; viewers that negotiated another get a rewritten copy. */
export const OUTPUT_PT = 96;


export interface ViewerSetOptions {
  streamId: string;
  settings: MediaSettings;
  transport: TransportOptions;
  /** The stream's output RTP time (90 kHz) of an output time (ms on the node's monotonic clock). */
  rtpTimestamp: (ptsMs: number) => number;
  logger: Logger;
}

export class ViewerSet {
  readonly #opts: ViewerSetOptions;
  readonly #viewers = new Map<string, WhepSession>();
  /** What every viewer is sent under: one SSRC per output. */
  readonly ssrcs = { h264: randomSsrc(), vp8: randomSsrc(), audio: randomSsrc() };
  /** One H.264 packetization per encode ('' = the full one, else a rendition's): one SSRC, a sequence each (sessions join them up). */
  readonly #packetizers = new Map<string, H264Packetizer>();
  /** When each encode's last access unit came (performance.now()): a viewer moves only to one that flows. */
  readonly #lastUnitAt = new Map<string, number>();
  /** The renditions a viewer may move between, best first (one rung: no adaptation). */
  readonly #ladder: Rung[];
  /** The viewers' sound: placed on the capture clock, held until the picture of its moment goes out. */
  readonly #audio = new ViewerAudio({ send: (rtp) => this.#sendAudioNow(rtp) });
  readonly #audioSeq = new RtpSequence();
  /** Each output's RTP time against capture time (epoch via performance.timeOrigin), for sender reports. */
  readonly #clock: SenderClock = {
    // Output times are capture times on the node's monotonic clock (OutputClock), so video RTP time is the node's clock.
    video: (nowMs) => this.rtpTimestamp(nowMs),
    audio: (nowMs) => this.#audio.rtpAt(nowMs),
  };

  constructor(opts: ViewerSetOptions) {
    this.#opts = opts;
    const s = opts.settings;
    for (const name of ['', ...s.renditions.map((r) => r.name)]) {
      this.#packetizers.set(name, new H264Packetizer({ ssrc: this.ssrcs.h264, payloadType: OUTPUT_PT, maxPayload: s.rtpMaxPayload }));
    }
    // What each needs on the wire: video at its target + RTP framing (≈ 10 %) + the viewer's Opus.
    const need = (kbps: number) => Math.round(kbps * 1000 * 1.1 + VIEWER_AUDIO_BPS);
    this.#ladder = [{ name: '', bps: need(s.videoBitrateKbps) }, ...s.renditions.map((r) => ({ name: r.name, bps: need(r.bitrateKbps) }))].sort((a, b) => b.bps - a.bps);
  }

  /** Whether `rendition`'s access units flow now (one came in the last second). */
  #flowing(rendition: string): boolean {
    return performance.now() - (this.#lastUnitAt.get(rendition) ?? -Infinity) < 1000;
  }

  /** Viewers, all codecs, connected or not. */
  get size(): number {
    return this.#viewers.size;
  }

  /** Viewers sent `codec`. */
  count(codec: VideoCodec): number {
    let n = 0;
    for (const v of this.#viewers.values()) if (v.codec === codec) n++;
    return n;
  }

  /** Viewers that take audio (offered Opus), connected or connecting. */
  audioViewers(): number {
    let n = 0;
    for (const v of this.#viewers.values()) if (v.audioPayloadType !== undefined) n++;
    return n;
  }

  /** Connected viewers (what maxViewersPerStream caps). */
  connected(): number {
    let n = 0;
    for (const v of this.#viewers.values()) if (v.connected) n++;
    return n;
  }

  /** RTP time (90 kHz) of an output time (ms on the node's monotonic clock, OutputClock): the same for every codec. */
  rtpTimestamp(ptsMs: number): number {
    return this.#opts.rtpTimestamp(ptsMs);
  }

  /**
   * A new viewer, held until it closes. 503-class MediaError when the stream has
   * maxViewersPerStream connected viewers, or maxPendingViewersPerStream still connecting.
   */
  create(offer: PreparedOffer, sessionId: string, opts: { adaptive?: boolean } = {}): WhepSession {
    const s = this.#opts.settings;
    const connected = this.connected();
    if (connected >= s.maxViewersPerStream) {
      this.#opts.logger.warn(`addViewer() | refused: viewer limit [streamId:${this.#opts.streamId}] [limit:${s.maxViewersPerStream}]`);
      throw new MediaError('OVERLOADED', `this stream has its maximum of ${s.maxViewersPerStream} viewers; try again later`, { retryAfterS: 30 });
    }
    if (this.#viewers.size - connected >= s.maxPendingViewersPerStream) {
      throw new MediaError('OVERLOADED', 'too many viewers of this stream are still connecting; try again shortly', { retryAfterS: 5 });
    }
    const codec = offer.video?.codec ?? 'H264';
    const session = new WhepSession({
      id: sessionId,
      streamId: this.#opts.streamId,
      offer,
      transport: this.#opts.transport,
      settings: s,
      ssrcs: { video: codec === 'VP8' ? this.ssrcs.vp8 : this.ssrcs.h264, audio: this.ssrcs.audio },
      clock: this.#clock,
      ...(opts.adaptive !== false && codec === 'H264' ? { ladder: this.#ladder, flowing: (r: string) => this.#flowing(r) } : {}),
      logger: this.#opts.logger,
    });
    this.#viewers.set(sessionId, session);
    // First, so the stream's own close listener counts the viewers without this one.
    session.once('close', () => this.#viewers.delete(sessionId));
    return session;
  }

  /** One H.264 access unit (RTP time `ts`) of `rendition` ('' = the full encode), packetized once, to every H.264 viewer. */
  sendH264(nals: readonly Uint8Array[], ts: number, keyframe: boolean, rendition = ''): void {
    const packetizer = this.#packetizers.get(rendition);
    if (!packetizer) return;
    this.#lastUnitAt.set(rendition, performance.now());
    this.fanOut('H264', packetizer.packetize(nals, ts), keyframe, rendition);
  }

  /** Some viewer moves between renditions as its link allows (connected or connecting). */
  hasAdaptive(): boolean {
    for (const v of this.#viewers.values()) if (v.adaptive) return true;
    return false;
  }

  /** Viewers by the rendition they are sent now ('' = the full encode; H.264 viewers only). */
  byRendition(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const v of this.#viewers.values()) if (v.codec === 'H264') out[v.rendition || 'full'] = (out[v.rendition || 'full'] ?? 0) + 1;
    return out;
  }

  /** Each adaptive viewer's link and rendition (at most `limit`). */
  bandwidths(limit: number): (ViewerBandwidthStatus & { sessionId: string })[] {
    const out: (ViewerBandwidthStatus & { sessionId: string })[] = [];
    for (const v of this.#viewers.values()) {
      const b = v.bandwidth();
      if (b && out.length < limit) out.push({ sessionId: v.id, ...b });
    }
    return out;
  }

  /** One frame's packets (written with OUTPUT_PT) of `rendition` to every viewer of `codec`, each taking the rendition it is sent. */
  fanOut(codec: VideoCodec, packets: Buffer[], keyframe: boolean, rendition = ''): void {
    const first = packets[0];
    if (first && first.length >= 12 && rendition === '') {
      // Its output time, back from its RTP time (signed distance from now's, 90 kHz): how late the picture goes.
      const now = performance.now();
      const ticks = rtpDelta(first.readUInt32BE(4), this.rtpTimestamp(now));
      this.#audio.videoOut(now + ticks / 90);
    }
    let byPt: Map<number, Buffer[]> | null = null;
    for (const v of this.#viewers.values()) {
      if (v.codec !== codec) continue;
      const pt = v.videoPayloadType;
      if (pt === OUTPUT_PT) {
        v.sendAccessUnit(packets, keyframe, rendition);
        continue;
      }
      byPt ??= new Map();
      let copy = byPt.get(pt);
      if (!copy) byPt.set(pt, (copy = packets.map((p) => rewriteRtp(p, { payloadType: pt }))));
      v.sendAccessUnit(copy, keyframe, rendition);
    }
  }

  /**
   * The publisher's Opus (or the soundtrack's mix), under our audio SSRC and each viewer's payload
   * type, once the picture captured with it goes out (ViewerAudio). `encoderDelayMs`: how much
   * earlier than its RTP time the packet's sound was pushed to its encoder (ours: the mix's).
   */
  sendAudio(rtp: Buffer, encoderDelayMs = 0): void {
    // Without a viewer that takes audio it is only placed (the clock stays current), not queued.
    this.#audio.push(rtp, this.audioViewers() > 0, encoderDelayMs);
  }

  #sendAudioNow(rtp: Buffer): void {
    // One sequence across sources (publisher, soundtrack mix, the next publisher): RtpSequence.
    const seq = this.#audioSeq.next(rtp);
    const byPt = new Map<number, Buffer>();
    for (const v of this.#viewers.values()) {
      const pt = v.audioPayloadType;
      if (pt === undefined) continue;
      let out = byPt.get(pt);
      if (!out) byPt.set(pt, (out = rewriteRtp(rtp, { payloadType: pt, ssrc: this.ssrcs.audio, seq })));
      v.sendAudio(out);
    }
  }

  /** How long the viewers' sound waits for its picture now, ms (ViewerAudio.holdMs). */
  get audioHoldMs(): number {
    return this.#audio.holdMs;
  }

  closeAll(): void {
    this.#audio.close();
    for (const v of [...this.#viewers.values()]) v.close('closed');
  }
}

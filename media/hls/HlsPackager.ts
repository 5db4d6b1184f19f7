/**
 * Our own low-latency HLS packager (draft-pantos-hls-rfc8216bis §4.4.3.7–§6.2.5.2): the stream's
 * one encoder's access units (and the AAC frames of AacEncoderBin) become fMP4 parts of
 * ≈ partTargetMs, grouped into segments of ≈ segmentTargetMs that start on keyframes. Everything
 * lives in memory in a sliding window of `windowSegments` segments, so memory is bounded
 * (≈ window × segment bytes × 2) and nothing is left behind when the stream closes.
 *
 * Playlists: `ll` (index.m3u8) carries EXT-X-PART, EXT-X-PRELOAD-HINT, EXT-X-SERVER-CONTROL
 * CAN-BLOCK-RELOAD=YES and PART-HOLD-BACK; `plain` (plain.m3u8) lists whole segments only, for
 * players without LL-HLS. `waitFor(msn, part)` implements blocking playlist reload.
 *
 * Timing: media time is the stream's output timeline (OutputClock: a live frame's capture time on
 * the node's monotonic clock, not when it was encoded) since the first keyframe, 90 kHz, with
 * every gap cut out: the timeline never has a hole. Each AU is held until the next one arrives,
 * so every sample's duration is the interval between their output times — the publisher's own
 * frame intervals, however late or bunched the encoder gave them out (one frame of added latency,
 * ≈ 33 ms), at most a part. A gap over `stallMs`, the publisher leaving (flush) and a new encoder
 * configuration end the segment; the next one starts after EXT-X-DISCONTINUITY, its timestamps
 * continuing where the last frame ended. (Timestamps that jumped by the gap left a hole in the
 * players' buffers: hls.js froze up to 4 s at every publish, leave and resolution change.)
 *
 * Slate: the slate (decision 0011) comes through the same encoder as live frames, so each access
 * unit says which it is. Players get both alike; recordings keep live frames only, so a segment
 * records where its leading live run ends (a part ends there), and the first live keyframe after
 * the slate starts a segment of its own (one is asked for at once): a recording loses at most the
 * few live frames before that keyframe, which reference the slate.
 *
 * Audio: one AAC track, contiguous (1024-sample frames) from the first keyframe. Frames are
 * placed by arrival time (the same monotonic clock); gaps over `audioGapMs` are filled with silent frames, and frames more
 * than `audioAheadMs` ahead of their arrival time are dropped, so A/V stays within ≈ 200 ms. When
 * the publisher has no audio, each part is padded with silence up to its end, so players that
 * buffer audio and video together never wait for audio.
 */
import type { Logger } from 'pino';
import { AAC_ASC, AAC_CHANNELS, AAC_SAMPLE_RATE, AAC_SILENT_FRAME } from '../gst/AacEncoderBin.ts';
import { AAC_SAMPLES_PER_FRAME, VIDEO_TIMESCALE, fragment, initSegment, type VideoSample } from './Fmp4Muxer.ts';
import { InvalidStateError } from '../errors.ts';
import { NAL_AUD, NAL_PPS, NAL_SPS, nalType, spsSize } from '../H264Nal.ts';

export interface HlsPackagerOptions {
  /** Part target, ms (LL-HLS parts; PART-TARGET). Default 200. */
  partTargetMs: number;
  /**
   * PART-HOLD-BACK, ms: how far behind the live edge an LL-HLS player sits (hls.js and AVPlayer
   * take it as their target latency). Default 3 × partTargetMs, the spec's recommendation; more
   * behind a cache that can hand a part out late (docs/operations.md). At least 2 × partTargetMs.
   */
  partHoldBackMs?: number;
  /** Segment target, ms: a keyframe is requested when a segment reaches it. Default 1000. */
  segmentTargetMs: number;
  /** Complete segments kept (and listed). Default 6. */
  windowSegments: number;
  /** Newest complete segments whose parts are still listed and served. Default 3. */
  partSegments: number;
  /** Frame duration used when the next frame is not coming (stall/close), ms. */
  nominalFrameMs: number;
  logger: Logger;
  /** Asks the encoder for an IDR (segment boundaries). */
  requestKeyUnit: () => void;
  /** Called when a player starts requesting after `demandIdleMs` without requests (starts the AAC encoder). */
  onDemand?: () => void;
  /**
   * Another rendition's packager whose segments this one repeats: it starts on one of the leader's
   * segment starts, whenever it started (renditions run on demand), with the leader's media
   * sequence number, media time and discontinuity count there; from then on the same frames and
   * key flags make the same decisions, so players switch between them at any segment.
   */
  leader?: HlsPackager;
  /** Called with each complete segment (the clip buffer and recordings keep them past the window). */
  onSegment?: (segment: CompletedSegment) => void;
}

/** A complete segment with what it needs to play on its own: its init segment. */
export interface CompletedSegment {
  msn: number;
  /** Init segments change when the encoder's SPS does; segments play only after their own. */
  initId: number;
  init: Buffer;
  /** moof+mdat fragments, starting on a keyframe. */
  bytes: Buffer;
  /** Media time of the first sample, ms (the timeline the fragments' timestamps use). */
  startMs: number;
  durationMs: number;
  /** ms epoch of the first sample. */
  wallStartMs: number;
  /** The publisher was away before this segment (a gap in media time). */
  discontinuity: boolean;
  /**
   * Bytes of `bytes` from its start that hold live frames only (whole parts): all of them for a
   * live segment, fewer when the slate followed within it, 0 when it starts on the slate. Its
   * live frames after a slate frame are not counted: they reference the slate.
   */
  liveBytes: number;
  /** Media time of those live bytes, ms. */
  liveDurationMs: number;
}

/** ms without any HLS request after which the stream counts as not watched over HLS. */
export const HLS_DEMAND_IDLE_MS = 30_000;

interface Part {
  index: number;
  bytes: Buffer | null;
  ticks: number;
  independent: boolean;
}

interface Segment {
  msn: number;
  /** Media time of the first sample, 90 kHz ticks. */
  startTicks: number;
  /** Output time of the first sample (ms, the access unit's ptsMs): where a rendition's packager joins it. */
  startPtsMs: number;
  initId: number;
  discontinuity: boolean;
  /** Parts before its first slate frame (each holds live frames only); null while it has none. */
  liveParts: number | null;
  /** ms epoch of the first sample (EXT-X-PROGRAM-DATE-TIME). */
  wallStartMs: number;
  parts: Part[];
  ticks: number;
  complete: boolean;
  bytes: Buffer | null;
}

interface Held {
  nals: Uint8Array[];
  keyframe: boolean;
  /** A slate frame (not the publisher's). */
  slate: boolean;
  t: number;
  wallMs: number;
  /** The access unit's output time, ms. */
  ptsMs: number;
}

interface Waiter {
  done: (ok: boolean) => void;
  test: () => boolean;
  timer: NodeJS.Timeout;
}

export interface HlsPackagerStats {
  /** Media sequence number of the newest segment (complete or not); -1 before the first. */
  msn: number;
  segments: number;
  parts: number;
  bytesHeld: number;
  audioFramesSilent: number;
  audioFramesDropped: number;
  /** Times the audio was placed again after coming early for a second (see AUDIO_RESYNC_FRAMES). */
  audioResyncs: number;
  /** Pauses cut out of the media timeline (output stalls, the publisher away, a new encoder size): how many. */
  cuts: number;
  /** The media time those cuts took out, seconds (players and the audio skip it; see pushVideo). */
  cutSeconds: number;
}

const STALL_MS = 1000;
/**
 * Segments (and parts) stay served this many segments after they leave the playlist. A player
 * requests what the playlist it read last listed, and that playlist can be a second old (a shared
 * cache holds it up to s-maxage=1) or the player a second behind: §6.2.2 asks that a segment stay
 * available after its removal for its duration plus the playlist's; one segment more covers a
 * player a segment target late.
 */
const RETIRED_SEGMENTS = 1;
const AUDIO_GAP_MS = 150;
const AUDIO_AHEAD_MS = 200;
/**
 * Audio that has come over AUDIO_AHEAD_MS early this many frames in a row (≈ 1 s) is placed again
 * from where the timeline is: its clock and the video's disagree (the video timeline moved on
 * without it), and dropping it waits for a catch-up that the silence padded behind the video never
 * lets come — the stream would be silent for good.
 */
const AUDIO_RESYNC_FRAMES = 47;
/** Publisher with audio: silence is only padded this far behind the video (its audio arrives late). */
const AUDIO_FILL_LAG_MS = 300;

export class HlsPackager {
  readonly #opts: HlsPackagerOptions;
  readonly #logger: Logger;
  #closed = false;
  #epochMs: number | undefined;
  readonly #inits = new Map<number, { bytes: Buffer; sps: string }>();
  #initId = -1;
  #segments: Segment[] = [];
  /** Segments that left the playlist, newest last, still served (RETIRED_SEGMENTS). */
  #retired: Segment[] = [];
  #current: Segment | null = null;
  #nextMsn = 0;
  #discontinuitySeq = 0;
  #pendingDiscontinuity = false;
  #held: Held | null = null;
  #sps: Uint8Array | undefined;
  #pps: Uint8Array | undefined;
  #samples: VideoSample[] = [];
  #partTicks = 0;
  #partStart = 0;
  #fragmentSeq = 1;
  #keyUnitAsked = false;
  /** 90 kHz ticks of gaps cut out of the media timeline (see pushVideo). */
  #offsetTicks = 0;
  /** With a leader: on its timeline yet (#join). */
  #joined = false;
  /** With a leader, before joining: the last key frame, which may start one of the leader's segments. */
  #candidate: Held | null = null;
  /** Gaps cut out of the media timeline (see pushVideo), and their total length in 90 kHz ticks. */
  #cuts = 0;
  #cutTicks = 0;
  /** Media time where the next frame starts after a segment ended on a gap (flush, stall, new init); ticks. */
  #resumeTicks: number | undefined;
  #audioPending: Uint8Array[] = [];
  #audioBase = 0;
  /** Next audio sample position (audio timescale since epoch); undefined until audio starts. */
  #audioNext: number | undefined;
  #audioExpected = false;
  #waiters = new Set<Waiter>();
  #lastRequestAt = -Infinity;
  audioFramesSilent = 0;
  audioFramesDropped = 0;
  audioResyncs = 0;
  /** Audio frames dropped in a row as early. */
  #audioEarly = 0;
  /** Samples added to every audio frame's position since the last resync (AUDIO_RESYNC_FRAMES); 0 after a gap. */
  #audioShift = 0;

  constructor(opts: HlsPackagerOptions) {
    this.#opts = opts;
    this.#logger = opts.logger;
  }

  get partTargetTicks(): number {
    return Math.round((this.#opts.partTargetMs / 1000) * VIDEO_TIMESCALE);
  }

  /** EXT-X-TARGETDURATION, s: segments are cut at 1.5 × segment target at the latest. */
  get targetDuration(): number {
    return Math.ceil((this.#opts.segmentTargetMs * 1.5) / 1000);
  }

  /** Marks an HLS request (playlist or media); the first after an idle spell calls onDemand. */
  markRequested(): void {
    const now = performance.now();
    const idle = now - this.#lastRequestAt > HLS_DEMAND_IDLE_MS;
    this.#lastRequestAt = now;
    if (idle) this.#opts.onDemand?.();
  }

  /** Whether an HLS player requested anything in the last HLS_DEMAND_IDLE_MS. */
  get watched(): boolean {
    return performance.now() - this.#lastRequestAt <= HLS_DEMAND_IDLE_MS;
  }

  /** Whether the publisher's real audio reaches the packager (decides how eagerly silence is padded). */
  set audioExpected(v: boolean) {
    this.#audioExpected = v;
  }

  #ticks(atMs: number): number {
    return Math.round((atMs - (this.#epochMs ?? atMs)) * (VIDEO_TIMESCALE / 1000));
  }

  /** One encoder access unit (Annex B NALs, as EncoderBin emits them) at `ptsMs` on the output timeline; `slate`: a slate frame, not the publisher's. */
  pushVideo(au: { nals: Uint8Array[]; keyframe: boolean; ptsMs: number }, slate = false): void {
    if (this.#closed) return;
    const nals: Uint8Array[] = [];
    let sps: Uint8Array | undefined;
    let pps: Uint8Array | undefined;
    for (const nal of au.nals) {
      const type = nalType(nal);
      if (type === NAL_SPS) sps = nal;
      else if (type === NAL_PPS) pps = nal;
      else if (type !== NAL_AUD) nals.push(nal); // AUD and parameter sets are dropped: avcC carries SPS/PPS
    }
    if (this.#initId < 0 && !au.keyframe) {
      this.#askKeyUnit();
      return;
    }
    if (au.keyframe && sps && pps && (this.#initId < 0 || !sameBytes(sps, this.#sps) || !sameBytes(pps, this.#pps))) {
      // New stream configuration (first keyframe, or the encoder was rebuilt at a new size).
      this.#endOnGap();
      this.#sps = sps;
      this.#pps = pps;
      const leader = this.#opts.leader;
      this.#epochMs ??= (leader ? leader.#epochMs : undefined) ?? au.ptsMs;
      this.#initId++;
      const { width, height } = spsSize(sps);
      this.#inits.set(this.#initId, {
        bytes: initSegment({ width, height, sps, pps }, { sampleRate: AAC_SAMPLE_RATE, channels: AAC_CHANNELS, asc: AAC_ASC }),
        sps: Buffer.from(sps).toString('hex'),
      });
      this.#logger.debug(`pushVideo() | new init segment [initId:${this.#initId}] [size:${width}x${height}]`);
    }
    const wallMs = Date.now() - (performance.now() - au.ptsMs);
    if (this.#opts.leader && !this.#joined && !this.#join({ nals, keyframe: au.keyframe, slate, t: 0, wallMs, ptsMs: au.ptsMs })) return;
    // Output times, not arrival: AUs reach Node late or in bursts when the node is busy, and the
    // samples keep their frames' intervals all the same. The output clock never goes backwards;
    // a tick more keeps decode times strictly increasing whatever a caller gives.
    const arrival = this.#ticks(au.ptsMs) - this.#offsetTicks;
    if (this.#held && arrival - this.#held.t > (STALL_MS / 1000) * VIDEO_TIMESCALE) {
      // Stalled: the segment ends with the held frame, the next one follows a discontinuity.
      this.#endOnGap();
      this.#audioNext = undefined;
      this.#audioPending = [];
    }
    if (!this.#current && !this.#held && !au.keyframe) {
      // After a gap a segment (and a player) starts on a keyframe; the frames before it take no media time.
      this.#askKeyUnit();
      return;
    }
    let t = this.#held ? Math.max(arrival, this.#held.t + 1) : arrival;
    // A frame may not outlast a part (PART-TARGET is a hard upper bound, §4.4.4.9): a short freeze
    // is cut out of the media timeline, and so is every longer gap after a segment ended on one;
    // audio follows the same offset.
    const from = this.#held ? this.#held.t + this.partTargetTicks : this.#resumeTicks;
    if (from !== undefined && (t > from || !this.#held)) {
      if (t > from) {
        this.#cuts++;
        this.#cutTicks += t - from;
      }
      this.#offsetTicks += t - from;
      t = from;
    }
    this.#resumeTicks = undefined;
    const held = this.#held;
    this.#held = { nals, keyframe: au.keyframe, slate, t, wallMs, ptsMs: au.ptsMs };
    if (held) this.#place(held, Math.max(1, t - held.t));
  }

  /**
   * A rendition's packager joins its leader's timeline at one of the leader's segment starts.
   * The leader decides that a frame starts a segment when it places the frame, on the frame after
   * it; this packager gets each frame after the leader got the next one (a rendition encodes a
   * frame once the stream's encoder gave it out), so a key frame waits here as the candidate until
   * this packager's next frame, when the leader has decided. Joined, the candidate is held with
   * the leader's media time and the leader's offset, msn and discontinuity count are this one's.
   * False: the frame is dropped (not on the leader's timeline yet).
   */
  #join(frame: Held): boolean {
    const leader = this.#opts.leader;
    const c = this.#candidate;
    this.#candidate = frame.keyframe ? frame : null;
    const seg = c && leader ? leader.#listed().find((x) => x.startPtsMs === c.ptsMs) : undefined;
    if (!c || !leader || !seg) return false;
    this.#joined = true;
    this.#candidate = null;
    this.#nextMsn = seg.msn;
    this.#offsetTicks = this.#ticks(c.ptsMs) - seg.startTicks;
    this.#discontinuitySeq = leader.#discontinuityOf(seg.msn);
    this.#pendingDiscontinuity = false;
    this.#resumeTicks = undefined;
    this.#audioShift = leader.#audioShift;
    this.#held = { ...c, t: seg.startTicks };
    this.#logger.debug(`join() | on the leader's timeline [msn:${seg.msn}]`);
    return true;
  }

  /** The segments an LL-HLS playlist lists: the complete ones in the window, then the open one. */
  #listed(): Segment[] {
    return this.#current ? [...this.#segments, this.#current] : this.#segments;
  }

  /** The discontinuity sequence number of segment `msn` as the playlist gives it (for a rendition joining there). */
  #discontinuityOf(msn: number): number {
    let n = this.#discontinuitySeq;
    this.#listed().forEach((s, i) => {
      if (i > 0 && s.discontinuity && s.msn <= msn) n++;
    });
    return n;
  }

  /** Ends the open segment with the held frame at its nominal length; the next frame continues the timeline right after it. */
  #endOnGap(): void {
    this.#audioShift = 0;
    this.#audioEarly = 0;
    if (this.#held) this.#resumeTicks = this.#held.t + this.#nominalTicks();
    this.#flushHeld();
    this.#closeSegment();
    if (this.#initId >= 0) this.#pendingDiscontinuity = true;
  }

  /** One raw AAC frame (1024 samples at 48 kHz) that reached Node at atMs. */
  pushAudio(frame: Uint8Array, atMs: number): void {
    if (this.#closed || this.#epochMs === undefined || !this.#current) return;
    const pos = Math.round(((atMs - this.#epochMs) / 1000 - this.#offsetTicks / VIDEO_TIMESCALE) * AAC_SAMPLE_RATE) + this.#audioShift;
    if (this.#audioNext === undefined) this.#startAudio(Math.max(pos, 0));
    const next = this.#audioNext ?? 0;
    const gap = pos - next;
    if (gap > (AUDIO_GAP_MS / 1000) * AAC_SAMPLE_RATE) {
      this.#fillSilence(Math.floor(gap / AAC_SAMPLES_PER_FRAME));
    } else if (-gap > (AUDIO_AHEAD_MS / 1000) * AAC_SAMPLE_RATE) {
      if (++this.#audioEarly < AUDIO_RESYNC_FRAMES) {
        this.audioFramesDropped++;
        return;
      }
      this.#audioShift -= gap;
      this.audioResyncs++;
      this.#logger.warn(`pushAudio() | audio ${(-gap / AAC_SAMPLE_RATE).toFixed(3)} s early for ${AUDIO_RESYNC_FRAMES} frames in a row: placed from the timeline again`);
    }
    this.#audioEarly = 0;
    this.#audioPending.push(frame);
    this.#audioNext = (this.#audioNext ?? 0) + AAC_SAMPLES_PER_FRAME;
  }

  #startAudio(pos: number): void {
    this.#audioBase = pos;
    this.#audioNext = pos;
    this.#audioPending = [];
  }

  #fillSilence(frames: number): void {
    for (let i = 0; i < frames; i++) this.#audioPending.push(AAC_SILENT_FRAME);
    this.audioFramesSilent += frames;
    this.#audioNext = (this.#audioNext ?? 0) + frames * AAC_SAMPLES_PER_FRAME;
  }

  #nominalTicks(): number {
    return Math.round((this.#opts.nominalFrameMs / 1000) * VIDEO_TIMESCALE);
  }

  #place(s: Held, dur: number): void {
    const target = (this.#opts.segmentTargetMs / 1000) * VIDEO_TIMESCALE;
    const cap = target * 1.5;
    if (!this.#current) {
      if (!s.keyframe) {
        // A segment (and a player) starts on a keyframe.
        this.#askKeyUnit();
        return;
      }
      this.#startSegment(s);
    }
    const seg = this.#current;
    if (!seg) return;
    const segTicks = seg.ticks + this.#partTicks;
    // Back from the slate: the first live keyframe starts a segment (recordings keep it whole).
    const backLive = !s.slate && seg.liveParts !== null;
    if (backLive && !s.keyframe) this.#askKeyUnit();
    if (segTicks > 0 && (s.keyframe ? segTicks >= target / 2 || backLive : segTicks + dur > cap)) {
      this.#closeSegment();
      this.#startSegment(s);
    } else if (this.#partTicks + dur > this.partTargetTicks || (s.slate && seg.liveParts === null && this.#samples.length > 0)) {
      // The first slate frame starts a part: the live run before it is whole parts.
      this.#closePart();
    }
    const placed = this.#current;
    if (placed && s.slate && placed.liveParts === null) placed.liveParts = placed.parts.length;
    if (this.#samples.length === 0) this.#partStart = s.t;
    this.#samples.push({ nals: s.nals, duration: dur, keyframe: s.keyframe });
    this.#partTicks += dur;
    const cur = this.#current;
    // Ask ≈150 ms early: the IDR comes out 2–3 frames after the request (appsrc queue + x264).
    if (cur && cur.ticks + this.#partTicks >= target - 0.15 * VIDEO_TIMESCALE) this.#askKeyUnit();
  }

  /** Asks the encoder for a key unit, once until the next segment starts. */
  #askKeyUnit(): void {
    if (this.#keyUnitAsked) return;
    this.#keyUnitAsked = true;
    this.#opts.requestKeyUnit();
  }

  #startSegment(s: Held): void {
    const leader = this.#opts.leader;
    if (leader && this.#joined) {
      // Joined, the leader decided this segment first: a different start means a frame went
      // missing on one side (a rendition that could not keep up), and players switching there glitch.
      const theirs = leader.#listed().find((x) => x.msn === this.#nextMsn);
      if (theirs && theirs.startPtsMs !== s.ptsMs) this.#logger.warn(`startSegment() | segment start differs from the leader's [msn:${this.#nextMsn}] [ptsMs:${s.ptsMs.toFixed(1)}] [leaderPtsMs:${theirs.startPtsMs.toFixed(1)}]`);
    }
    this.#current = {
      msn: this.#nextMsn++,
      startTicks: s.t,
      startPtsMs: s.ptsMs,
      initId: this.#initId,
      discontinuity: this.#pendingDiscontinuity,
      liveParts: null,
      wallStartMs: s.wallMs,
      parts: [],
      ticks: 0,
      complete: false,
      bytes: null,
    };
    this.#pendingDiscontinuity = false;
    this.#keyUnitAsked = false;
    if (this.#audioNext === undefined) this.#startAudio(Math.round((s.t / VIDEO_TIMESCALE) * AAC_SAMPLE_RATE));
  }

  #closePart(): void {
    const seg = this.#current;
    if (!seg || this.#samples.length === 0) return;
    const endTicks = this.#partStart + this.#partTicks;
    const lagMs = this.#audioExpected ? AUDIO_FILL_LAG_MS : 0;
    const fillTo = Math.round((endTicks / VIDEO_TIMESCALE - lagMs / 1000) * AAC_SAMPLE_RATE);
    if (this.#audioNext !== undefined && fillTo > this.#audioNext) {
      this.#fillSilence(Math.ceil((fillTo - this.#audioNext) / AAC_SAMPLES_PER_FRAME));
    }
    const audio = this.#audioPending.length > 0 ? { baseTime: this.#audioBase, frames: this.#audioPending } : null;
    const bytes = fragment({ sequence: this.#fragmentSeq++, video: { baseTime: this.#partStart, samples: this.#samples }, audio });
    this.#audioBase = this.#audioNext ?? this.#audioBase;
    this.#audioPending = [];
    seg.parts.push({ index: seg.parts.length, bytes, ticks: this.#partTicks, independent: this.#samples[0]?.keyframe ?? false });
    seg.ticks += this.#partTicks;
    this.#samples = [];
    this.#partTicks = 0;
    this.#wake();
  }

  #closeSegment(): void {
    this.#closePart();
    const seg = this.#current;
    if (!seg) return;
    this.#current = null;
    if (seg.parts.length === 0) {
      this.#nextMsn--;
      return;
    }
    seg.complete = true;
    seg.bytes = Buffer.concat(seg.parts.map((p) => p.bytes ?? Buffer.alloc(0)));
    this.#segments.push(seg);
    const init = this.#inits.get(seg.initId)?.bytes;
    if (this.#opts.onSegment && init) {
      const live = seg.parts.slice(0, seg.liveParts ?? seg.parts.length);
      const segment: CompletedSegment = {
        msn: seg.msn,
        initId: seg.initId,
        init,
        bytes: seg.bytes,
        startMs: (seg.startTicks / VIDEO_TIMESCALE) * 1000,
        durationMs: (seg.ticks / VIDEO_TIMESCALE) * 1000,
        wallStartMs: seg.wallStartMs,
        discontinuity: seg.discontinuity,
        liveBytes: live.reduce((n, p) => n + (p.bytes?.length ?? 0), 0),
        liveDurationMs: (live.reduce((n, p) => n + p.ticks, 0) / VIDEO_TIMESCALE) * 1000,
      };
      try {
        this.#opts.onSegment(segment);
      } catch (err) {
        this.#logger.error({ err }, `closeSegment() | onSegment threw [msn:${seg.msn}]`);
      }
    }
    while (this.#segments.length > this.#opts.windowSegments) {
      const gone = this.#segments.shift();
      if (!gone) break;
      if (gone.discontinuity) this.#discontinuitySeq++;
      this.#retired.push(gone);
      if (this.#retired.length > RETIRED_SEGMENTS) this.#retired.shift();
    }
    // Parts of older segments are no longer listed (§6.2.2: remove parts > 3 target durations old);
    // their bytes are served RETIRED_SEGMENTS segments longer, like whole segments.
    const served = [...this.#retired, ...this.#segments];
    const keepFrom = served.length - this.#opts.partSegments - RETIRED_SEGMENTS;
    served.forEach((s, i) => {
      if (i < keepFrom) for (const p of s.parts) p.bytes = null;
    });
    for (const id of [...this.#inits.keys()]) {
      if (id !== this.#initId && !served.some((s) => s.initId === id)) this.#inits.delete(id);
    }
    this.#wake();
  }

  #flushHeld(): void {
    if (this.#held) this.#place(this.#held, this.#nominalTicks());
    this.#held = null;
  }

  #wake(): void {
    for (const w of [...this.#waiters]) {
      if (w.test()) {
        clearTimeout(w.timer);
        this.#waiters.delete(w);
        w.done(true);
      }
    }
  }

  #wait(test: () => boolean, timeoutMs: number): Promise<boolean> {
    if (this.#closed) return Promise.resolve(false);
    if (test()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const w: Waiter = {
        test,
        done: resolve,
        timer: setTimeout(() => {
          this.#waiters.delete(w);
          resolve(false);
        }, timeoutMs),
      };
      this.#waiters.add(w);
    });
  }

  /** Newest segment's msn (complete or not), -1 before the first part. */
  get lastMsn(): number {
    return this.#current && this.#current.parts.length > 0 ? this.#current.msn : (this.#segments.at(-1)?.msn ?? -1);
  }

  /** True once at least one part exists (a playlist can be served). */
  get hasMedia(): boolean {
    return this.#segments.length > 0 || (this.#current?.parts.length ?? 0) > 0;
  }

  /** Blocking playlist reload (§6.2.5.2): resolves true once the playlist holds segment msn (part `part`, if given). */
  waitFor(msn: number, part: number | undefined, timeoutMs: number): Promise<boolean> {
    return this.#wait(() => this.#has(msn, part), timeoutMs);
  }

  /** Resolves true once a whole segment exists (what a multivariant playlist measures BANDWIDTH on). */
  waitForSegment(timeoutMs: number): Promise<boolean> {
    return this.#wait(() => this.#segments.length > 0, timeoutMs);
  }

  /** Resolves true once any media exists. */
  waitForMedia(timeoutMs: number): Promise<boolean> {
    return this.#wait(() => this.hasMedia, timeoutMs);
  }

  #has(msn: number, part: number | undefined): boolean {
    if (part === undefined) return this.#segments.some((s) => s.msn >= msn);
    const cur = this.#current;
    if (this.#segments.some((s) => s.msn > msn)) return true;
    if (cur && cur.msn > msn && cur.parts.length > 0) return true;
    const seg = cur?.msn === msn ? cur : this.#segments.find((s) => s.msn === msn);
    return seg !== undefined && seg.parts.length > part;
  }

  initSegment(id: number): Buffer | undefined {
    return this.#inits.get(id)?.bytes;
  }

  segment(msn: number): Buffer | undefined {
    return this.#completed(msn)?.bytes ?? undefined;
  }

  /**
   * A part's bytes; the part named by the preload hint (next part of the open segment) is waited
   * for (§6.2.6: a server SHOULD hold a request for the hinted part until it exists).
   */
  async part(msn: number, index: number, timeoutMs: number): Promise<Buffer | undefined> {
    const find = () => {
      const seg = this.#current?.msn === msn ? this.#current : this.#completed(msn);
      return seg?.parts[index]?.bytes ?? undefined;
    };
    const hit = find();
    if (hit) return hit;
    const cur = this.#current;
    const nextMsn = cur ? cur.msn : this.#nextMsn;
    const nextIndex = cur ? cur.parts.length : 0;
    const hinted = (msn === nextMsn && index === nextIndex) || (msn === nextMsn + 1 && index === 0);
    if (!hinted) return undefined;
    const ok = await this.#wait(() => find() !== undefined || this.#has(msn, index + 1) || this.#segments.some((s) => s.msn >= msn), timeoutMs);
    return ok ? find() : undefined;
  }

  /** A completed segment still served: listed, or retired from the playlist not long ago. */
  #completed(msn: number): Segment | undefined {
    return this.#segments.find((s) => s.msn === msn) ?? this.#retired.find((s) => s.msn === msn);
  }

  /** `ll`: LL-HLS media playlist (index.m3u8); `plain`: whole segments only (plain.m3u8). */
  playlist(kind: 'll' | 'plain'): string {
    const ll = kind === 'll';
    const secs = (ticks: number) => (ticks / VIDEO_TIMESCALE).toFixed(5);
    const partTarget = this.#opts.partTargetMs / 1000;
    const lines = ['#EXTM3U', `#EXT-X-VERSION:${ll ? 9 : 6}`, `#EXT-X-TARGETDURATION:${this.targetDuration}`];
    if (ll) {
      // PART-HOLD-BACK ≥ 2 × PART-TARGET (§4.4.3.8); 3 × is the recommended value.
      const holdBack = Math.max(2 * partTarget, (this.#opts.partHoldBackMs ?? 3 * this.#opts.partTargetMs) / 1000);
      lines.push(`#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=${holdBack.toFixed(3)}`);
      lines.push(`#EXT-X-PART-INF:PART-TARGET=${partTarget.toFixed(3)}`);
    }
    const listed = ll ? this.#listed() : this.#segments;
    lines.push(`#EXT-X-MEDIA-SEQUENCE:${listed[0]?.msn ?? this.#nextMsn}`);
    lines.push(`#EXT-X-DISCONTINUITY-SEQUENCE:${this.#discontinuitySeq}`);
    let initId = -1;
    const partsFrom = this.#segments.length - this.#opts.partSegments;
    listed.forEach((s, i) => {
      if (s.discontinuity && i > 0) lines.push('#EXT-X-DISCONTINUITY');
      if (s.initId !== initId) {
        lines.push(`#EXT-X-MAP:URI="init${s.initId}.mp4"`);
        initId = s.initId;
      }
      lines.push(`#EXT-X-PROGRAM-DATE-TIME:${new Date(s.wallStartMs).toISOString()}`);
      if (ll && (i >= partsFrom || !s.complete)) {
        for (const p of s.parts) lines.push(`#EXT-X-PART:DURATION=${secs(p.ticks)},URI="part${s.msn}.${p.index}.m4s"${p.independent ? ',INDEPENDENT=YES' : ''}`);
      }
      if (s.complete) lines.push(`#EXTINF:${secs(s.ticks)},`, `seg${s.msn}.m4s`);
    });
    if (ll) {
      const hint = this.#current ? `part${this.#current.msn}.${this.#current.parts.length}.m4s` : `part${this.#nextMsn}.0.m4s`;
      lines.push(`#EXT-X-PRELOAD-HINT:TYPE=PART,URI="${hint}"`);
    }
    return `${lines.join('\n')}\n`;
  }

  /**
   * What a multivariant playlist says of this packager's media (rfc8216bis §4.4.6.2): peak and
   * average bits per second of the complete segments held (null before one), the size and CODECS
   * of the current init segment (null before the first key frame).
   */
  variant(): { peakBps: number | null; averageBps: number | null; width: number; height: number; codecs: string } | null {
    const sps = this.#sps;
    if (!sps || sps.length < 4) return null;
    const { width, height } = spsSize(sps);
    let peak = 0;
    let bytes = 0;
    let ticks = 0;
    for (const seg of this.#segments) {
      if (!seg.bytes || seg.ticks <= 0) continue;
      peak = Math.max(peak, (seg.bytes.length * 8 * VIDEO_TIMESCALE) / seg.ticks);
      bytes += seg.bytes.length;
      ticks += seg.ticks;
    }
    // avc1.PPCCLL: profile_idc, constraint flags and level_idc, the SPS's bytes 1–3 (RFC 6381 §3.3).
    const avc = Buffer.from(sps.subarray(1, 4)).toString('hex');
    return {
      peakBps: ticks > 0 ? Math.round(peak) : null,
      averageBps: ticks > 0 ? Math.round((bytes * 8 * VIDEO_TIMESCALE) / ticks) : null,
      width,
      height,
      codecs: `avc1.${avc},mp4a.40.2`,
    };
  }

  stats(): HlsPackagerStats {
    const all = [...this.#retired, ...this.#listed()];
    let bytes = 0;
    let parts = 0;
    for (const s of all) {
      bytes += s.bytes?.length ?? 0;
      for (const p of s.parts) {
        bytes += p.bytes?.length ?? 0;
        if (p.bytes) parts++;
      }
    }
    return { msn: this.lastMsn, segments: this.#segments.length, parts, bytesHeld: bytes, audioFramesSilent: this.audioFramesSilent, audioFramesDropped: this.audioFramesDropped, audioResyncs: this.audioResyncs, cuts: this.#cuts, cutSeconds: this.#cutTicks / VIDEO_TIMESCALE };
  }

  #assertOpen(): void {
    if (this.#closed) throw new InvalidStateError('HLS packager closed');
  }

  /**
   * Ends the open segment with the held frame (the publisher left). The next publisher's media
   * starts a new segment after EXT-X-DISCONTINUITY, its timestamps continuing (the gap is cut out).
   */
  flush(): void {
    this.#assertOpen();
    this.#endOnGap();
    this.#audioNext = undefined;
    this.#audioPending = [];
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Drops every segment and fails pending blocking requests. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const w of this.#waiters) {
      clearTimeout(w.timer);
      w.done(false);
    }
    this.#waiters.clear();
    this.#segments = [];
    this.#retired = [];
    this.#current = null;
    this.#inits.clear();
    this.#samples = [];
    this.#audioPending = [];
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array | undefined): boolean {
  return b !== undefined && Buffer.from(a).equals(Buffer.from(b));
}

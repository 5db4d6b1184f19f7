/**
 * A stream's sound-reactive params (the `audio_mappings` param, native/params/AudioMapping.ts):
 * features of its audio (AudioFeatures) placed on the node's clock, and per output frame the
 * value each mapping gives its param from the audio of that frame's capture time.
 *
 *   publisher Opus RTP ─► OpusDecoderBin ─PCM─► AudioFeatures ─hops (1 ms, capture time)─┐
 *   soundtrack take at its play position ─────► AudioFeatures ─hops──────────────────────┴► atFrame(T) ─► params patch
 *
 * Publisher audio is placed like its video (CaptureClock): RTP time plus the least (arrival − RTP
 * time) of the last CAPTURE_WINDOW_MS, less the packet's length (a packet leaves once its last
 * sample is captured, so its least delay is at least its length). A frame captured at T is
 * processed once the audio up to T has been decoded (`waitFor`, at most settings.audioMappingWaitMs):
 * the audio of T travels in a packet that leaves up to one packet (20 ms) after T.
 *
 * The decoder runs only while a mapping takes the publisher's audio. No timers of its own besides
 * a waiting frame's bound.
 */
import type { Logger } from 'pino';
import { type AudioMapping, type MappedParam, parseMappedParam } from '../../native/params/index.ts';
import { AudioFeatures, type AudioHop } from './AudioFeatures.ts';
import type { LiveParams } from './FrameProcessor.ts';
import { OpusDecoderBin } from '../gst/OpusDecoderBin.ts';
import { RtpArrival } from '../webrtc/RtpArrival.ts';
import { SOUNDTRACK_SAMPLE_RATE, type Soundtrack } from './Soundtrack.ts';

/** How far back the least-delayed packet that places RTP time on the node's clock may be, ms (as CaptureClock). */
const CAPTURE_WINDOW_MS = 2000;
/** Hops kept per source, ms of audio: a frame older than this reads what is left. */
const KEEP_MS = 2000;
/** A soundtrack read further than this from the last one starts afresh (a seek, a stall), ms. */
const SOUNDTRACK_JUMP_MS = 500;
/** Audio read ahead of a fresh soundtrack read so its background is settled, ms. */
const SOUNDTRACK_WARMUP_MS = 250;
/**
 * Decoded audio this far behind the newest packet's RTP time is placed afresh from it, ms: the
 * decoder lost packets without concealing them (its leaky input dropped a burst). Less behind is
 * the decoder's lag (a busy machine: hundreds of ms), which must not move the audio.
 */
const RESYNC_BEHIND_MS = 1000;
/** Publisher audio silent this long is not waited for (a publisher without audio, a stalled decoder), ms. */
const AUDIO_STALE_MS = 250;
const FRAMES_PER_MS = SOUNDTRACK_SAMPLE_RATE / 1000;

/** Each mapping as status shows it. */
export interface AudioMappingStatus {
  source: AudioMapping['source'];
  feature: AudioMapping['feature'];
  param: string;
  /** The feature after smoothing at the last frame, 0–1 (null: no audio from the source yet). */
  featureValue: number | null;
  /** The value the last frame was given (null: none yet). */
  value: number | null;
}

interface Hop {
  /** Capture time of the hop's last sample, ms epoch. */
  at: number;
  hop: AudioHop;
}

/** One source's features on the node's clock. */
class Timeline {
  readonly features = new AudioFeatures();
  hops: Hop[] = [];
  /** Capture time just after the last sample pushed, ms epoch (null: nothing yet). */
  endAt: number | null = null;
  /** Date.now() of the last push. */
  pushedAt = 0;

  push(pcm: Int16Array, startAt: number, offset: number, frames: number, channels: 1 | 2): void {
    this.features.push(pcm, (hop, end) => this.hops.push({ at: startAt + end / FRAMES_PER_MS, hop }), offset, frames, channels);
    this.endAt = startAt + frames / FRAMES_PER_MS;
    this.pushedAt = Date.now();
    const keep = KEEP_MS;
    if (this.hops.length > keep * 1.5) this.hops = this.hops.slice(-keep);
  }

  reset(): void {
    this.hops = [];
    this.endAt = null;
  }
}

class MappingState {
  readonly m: AudioMapping;
  readonly target: MappedParam;
  /** The smoothed feature. */
  smooth = 0;
  /** Capture time of the last hop taken, ms epoch. */
  takenTo = -Infinity;
  featureValue: number | null = null;
  value: number | null = null;
  /** Events (onsets, beats) seen: seeds are picked by their count. */
  events = 0;
  readonly #a: number;

  constructor(m: AudioMapping) {
    this.m = m;
    const parsed = parseMappedParam(m.param);
    // The API checked the mapping; a param it let through parses.
    if ('error' in parsed) throw new Error(`audio_mappings: ${parsed.error}`);
    this.target = parsed;
    // Per 1 ms hop: exponential smoothing with time constant smoothing_ms (0: none).
    this.#a = m.smoothing_ms > 0 ? 1 - Math.exp(-1 / m.smoothing_ms) : 1;
  }

  /** Takes the hops up to `at` (ms epoch); true when an event (onset/beat) happened in them. */
  take(hops: readonly Hop[], at: number): boolean {
    let event = false;
    const isEvent = this.m.feature === 'onset' || this.m.feature === 'beat';
    // Hops are in time order: find the first one after what was taken.
    let i = hops.length;
    while (i > 0 && (hops[i - 1] as Hop).at > this.takenTo) i--;
    for (; i < hops.length; i++) {
      const h = hops[i] as Hop;
      if (h.at > at) break;
      this.takenTo = h.at;
      if (isEvent) {
        const e = this.m.feature === 'onset' ? h.hop.onset : h.hop.beat;
        if (e) event = true;
        this.smooth = e ? 1 : this.smooth * (1 - this.#a);
      } else {
        const raw = this.m.feature === 'rms' ? h.hop.rms : this.m.feature === 'band:low' ? h.hop.low : this.m.feature === 'band:mid' ? h.hop.mid : h.hop.high;
        this.smooth += this.#a * (raw - this.smooth);
      }
    }
    this.featureValue = event ? 1 : this.smooth;
    return event;
  }
}

export interface AudioMappingsOptions {
  streamId: string;
  /** Longest a frame waits for the publisher's audio of its time, ms (settings.audioMappingWaitMs). */
  waitMs: number;
  /** The soundtrack playing now (null: none). */
  soundtrack: () => Soundtrack | null;
  logger: Logger;
}

export class AudioMappings {
  readonly #opts: AudioMappingsOptions;
  #states: MappingState[] = [];
  readonly #publisher = new Timeline();
  readonly #soundtrack = new Timeline();
  #decoder: OpusDecoderBin | null = null;
  #payloadType: number | undefined;
  /** RTP time (48 kHz) on Date.now() by the least-delayed packet of the last CAPTURE_WINDOW_MS. */
  readonly #arrival = new RtpArrival(SOUNDTRACK_SAMPLE_RATE, CAPTURE_WINDOW_MS);
  /**
   * RTP time (unwrapped, ms) of the next decoded sample: the decoder's output is continuous (its
   * PLC fills lost packets), so it advances by what comes out, and is taken again from the packets
   * only when it runs ahead of the newest one or RESYNC_BEHIND_MS behind it.
   */
  #nextRtpMs: number | null = null;
  /** RTP time (unwrapped, ms) of the newest packet pushed. */
  #lastRtpMs = 0;
  /** Frames waiting for audio: resolved when it covers their time or their bound passes. */
  #waiters: { at: number; resolve: (came: boolean) => void; timer: NodeJS.Timeout }[] = [];
  /** Waits that ran out before the audio came. */
  #waitsExpired = 0;
  #stBuf = new Int16Array(0);
  /** What the mappings set last (a prompt weight is set inside the list with the others' values). */
  #applied: LiveParams = {};
  #closed = false;

  constructor(opts: AudioMappingsOptions) {
    this.#opts = opts;
  }

  /** Mappings are set (each change resets their state). */
  get active(): boolean {
    return this.#states.length > 0;
  }

  /**
   * Sets the mappings ([]: none). Returns null when they are the ones set, else the keys the old
   * ones had set (the stream's own values go back to the processor). Throws on a mapping the API
   * would not have let through.
   */
  set(mappings: readonly AudioMapping[]): (keyof LiveParams)[] | null {
    const before = JSON.stringify(this.#states.map((s) => s.m));
    if (before === JSON.stringify(mappings)) return null;
    const undo = Object.keys(this.#applied) as (keyof LiveParams)[];
    this.#states = mappings.map((m) => new MappingState(m));
    this.#applied = {};
    this.#soundtrack.reset();
    this.#syncDecoder();
    return undo;
  }

  /** The publisher's Opus payload type (undefined: no publisher, or one without audio). */
  setPublisher(payloadType: number | undefined): void {
    if (payloadType === this.#payloadType) return;
    this.#payloadType = payloadType;
    this.#arrival.reset();
    this.#stopDecoder();
    this.#syncDecoder();
  }

  #needsPublisher(): boolean {
    return this.#states.some((s) => s.m.source === 'publisher');
  }

  /** The decoder runs only while a mapping takes the publisher's audio and a publisher sends some. */
  #syncDecoder(): void {
    const want = !this.#closed && this.#needsPublisher() && this.#payloadType !== undefined;
    if (!want) {
      this.#stopDecoder();
      return;
    }
    if (this.#decoder) return;
    try {
      // Mono: the features mix the channels anyway, and Opus decodes to mono for less.
      this.#decoder = new OpusDecoderBin({ payloadType: this.#payloadType as number, channels: 1, logger: this.#opts.logger, onPcm: (pcm) => this.#onPcm(pcm) });
    } catch (err) {
      this.#opts.logger.error({ err }, `syncDecoder() | Opus decoder failed; publisher mappings stay still [streamId:${this.#opts.streamId}]`);
    }
  }

  #stopDecoder(): void {
    this.#decoder?.close();
    this.#decoder = null;
    this.#nextRtpMs = null;
    this.#publisher.reset();
  }

  /** Whether the publisher's audio is decoded now (tests, status). */
  get decoding(): boolean {
    return this.#decoder !== null;
  }

  /** One of the publisher's Opus RTP packets, as it arrived. */
  pushPublisherRtp(rtp: Uint8Array): void {
    if (!this.#decoder || rtp.length < 12) return;
    const ts = ((rtp[4] as number) << 24) | ((rtp[5] as number) << 16) | ((rtp[6] as number) << 8) | (rtp[7] as number);
    const rtpMs = this.#arrival.arrive(ts >>> 0, Date.now());
    this.#lastRtpMs = rtpMs;
    this.#nextRtpMs ??= rtpMs;
    try {
      this.#decoder.push(rtp);
    } catch {
      // Closed under us: the next sync rebuilds it.
    }
  }

  #onPcm(pcm: Int16Array): void {
    if (this.#closed) return;
    const frames = pcm.length;
    const lengthMs = frames / FRAMES_PER_MS;
    const least = this.#arrival.least;
    if (this.#nextRtpMs === null || least === undefined) return;
    // Output the packets cannot have made (ahead of the newest), or a second behind: placed afresh.
    if (this.#nextRtpMs > this.#lastRtpMs + 1 || this.#lastRtpMs - this.#nextRtpMs > RESYNC_BEHIND_MS) this.#nextRtpMs = this.#lastRtpMs;
    const prevEnd = this.#publisher.endAt;
    let startAt = this.#nextRtpMs + least - lengthMs;
    this.#nextRtpMs += lengthMs;
    // Within 2 ms of where the last one ended: the same run (the window's least delay moved a little).
    if (prevEnd !== null && Math.abs(startAt - prevEnd) < 2) startAt = prevEnd;
    this.#publisher.push(pcm, startAt, 0, frames, 1);
    this.#wake();
  }

  #wake(): void {
    const end = this.#publisher.endAt ?? -Infinity;
    this.#waiters = this.#waiters.filter((w) => {
      if (w.at > end) return true;
      clearTimeout(w.timer);
      w.resolve(true);
      return false;
    });
  }

  /**
   * Null when a frame captured at `at` (ms epoch) can take its params now; else a promise that
   * resolves once the publisher's audio of its time is decoded, or after waitMs.
   */
  waitFor(at: number): Promise<boolean> | null {
    if (!this.#decoder || this.#closed) return null;
    const tl = this.#publisher;
    if (tl.endAt === null || tl.endAt >= at || Date.now() - tl.pushedAt > AUDIO_STALE_MS) return null;
    return new Promise((resolve) => {
      const w = { at, resolve, timer: setTimeout(() => this.#expire(w), this.#opts.waitMs) };
      this.#waiters.push(w);
    });
  }

  /** Frames whose wait for the publisher's audio ran out (their params followed the sound a frame late). */
  get waitsExpired(): number {
    return this.#waitsExpired;
  }

  #expire(w: { resolve: (came: boolean) => void }): void {
    this.#waiters = this.#waiters.filter((x) => x !== w);
    this.#waitsExpired++;
    w.resolve(false);
  }

  /** Reads the soundtrack's take up to `at` into its timeline. */
  #readSoundtrack(at: number): void {
    const st = this.#opts.soundtrack();
    const tl = this.#soundtrack;
    if (!st) {
      tl.reset();
      return;
    }
    if (tl.endAt === null || Math.abs(at - tl.endAt) > SOUNDTRACK_JUMP_MS) {
      tl.reset();
      tl.endAt = at - SOUNDTRACK_WARMUP_MS;
    }
    const from = tl.endAt;
    const frames = Math.floor((at - from) * FRAMES_PER_MS);
    if (frames <= 0) return;
    if (this.#stBuf.length < frames * 2) this.#stBuf = new Int16Array(frames * 2);
    st.read(this.#stBuf, frames, from);
    tl.push(this.#stBuf, from, 0, frames, 2);
  }

  /**
   * A frame captured at `at` (ms epoch) is about to be processed: the patch of the mapped params
   * for it (null: nothing changes). `params` are the stream's params now (a prompt weight or a
   * ControlNet's scale is set inside its list).
   */
  atFrame(at: number, params: LiveParams): LiveParams | null {
    if (this.#states.length === 0 || this.#closed) return null;
    if (this.#states.some((s) => s.m.source === 'soundtrack')) this.#readSoundtrack(at);
    let patch: LiveParams = {};
    let changed = false;
    for (const s of this.#states) {
      const tl = s.m.source === 'publisher' ? this.#publisher : this.#soundtrack;
      if (tl.endAt === null) {
        s.featureValue = null;
        continue;
      }
      const event = s.take(tl.hops, at);
      const [lo, hi] = s.m.range;
      let value: number;
      if (s.target.kind === 'seed') {
        // The stream's own seed holds until the first event.
        if (!event) continue;
        s.events++;
        value = pickSeed(lo, hi, s.events, s.value);
      } else {
        // 1e-4 of the range: finer steps change nothing visible and would cost an update per frame.
        const step = Math.abs(hi - lo) / 1e4 || 1;
        // toPrecision: the steps add no float noise (0.4553, not 0.45530000000000004).
        value = Number((lo + Math.round(((s.featureValue ?? 0) * (hi - lo)) / step) * step).toPrecision(12));
      }
      if (value === s.value) continue;
      s.value = value;
      patch = { ...patch, ...targetPatch(s.target, value, { ...params, ...this.#applied, ...patch }) };
      changed = true;
    }
    if (!changed) return null;
    this.#applied = { ...this.#applied, ...patch };
    return patch;
  }

  /** The stream's params were set directly: every mapping sets its param again on the next frame. */
  paramsChanged(): void {
    for (const s of this.#states) s.value = null;
    this.#applied = {};
  }

  status(): AudioMappingStatus[] {
    return this.#states.map((s) => ({ source: s.m.source, feature: s.m.feature, param: s.m.param, featureValue: s.featureValue, value: s.value }));
  }

  /** Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopDecoder();
    for (const w of this.#waiters) {
      clearTimeout(w.timer);
      // Closing: the frame goes on as it is (it is not late for its sound; there is none to come).
      w.resolve(true);
    }
    this.#waiters = [];
  }
}

/** Golden-ratio steps: consecutive events give well-spread seeds, the same ones on every run. */
const PHI = 0.6180339887498949;

/** The seed of the `n`th event in [lo, hi], never the previous one when the range has two or more. */
function pickSeed(lo: number, hi: number, n: number, prev: number | null): number {
  const span = hi - lo + 1;
  let seed = lo + Math.floor(((n * PHI) % 1) * span);
  if (seed === prev && span > 1) seed = seed === hi ? lo : seed + 1;
  return Math.min(hi, Math.max(lo, seed));
}

/** The params patch that sets a mapped param to `value`. */
function targetPatch(target: MappedParam, value: number, params: LiveParams): LiveParams {
  switch (target.kind) {
    case 'guidance_scale':
    case 'delta':
    case 'seed':
      return { [target.kind]: value };
    case 'prompt_weights': {
      const prompt = params.prompt;
      if (typeof prompt === 'string' || prompt === undefined || target.index >= prompt.length) return {};
      return { prompt: prompt.map(([text, w], i) => [text, i === target.index ? value : w] as [string, number]) };
    }
    case 'conditioning_scale': {
      const list = params.controlnets;
      if (!list || target.index >= list.length) return {};
      return { controlnets: list.map((c, i) => (i === target.index ? { ...c, conditioning_scale: value } : c)) };
    }
  }
}

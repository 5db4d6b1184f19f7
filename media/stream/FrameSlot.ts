/**
 * A stream's frame processor and the one-frame slot in front of it. While the processor works on
 * a frame, a newer decoded frame replaces the one waiting (latest frame wins), so a slow processor
 * lowers fps but never adds latency.
 *
 *   decoded RGB frame ─► [slot: 1 frame] ─► FrameProcessor ─► output (the encoders)
 *
 * The processor is built once something needs it (a publisher whose params process frames); a
 * viewer alone never builds one (it costs worker threads and, with real models, GPU memory).
 * Frames that arrive while it is built are dropped.
 */
import type { Logger } from 'pino';
import { planUpdate, type ParamsChange, type StreamParams, type UpdatePlan } from '../../native/params/index.ts';
import type { Frame, FrameProcessor, FrameProcessorFactory, LiveParams } from './FrameProcessor.ts';
import type { ParamsMark } from './ParamsSchedule.ts';
import { StageTimer } from '../StageTimer.ts';

/**
 * - `none`: no processor (the params leave frames unchanged, or no publisher has needed one);
 * - `loading`: being built (frames that need it are dropped meanwhile);
 * - `ready`: processing frames.
 */
export type ProcessorState = 'none' | 'loading' | 'ready';

export interface FrameSlotOptions {
  streamId: string;
  createProcessor: FrameProcessorFactory;
  /** The stream's params now: a processor is built from them, and catches up on them when they changed meanwhile. */
  params: () => LiveParams;
  /**
   * Where viewers will see a frame captured at `capturedAt` (ms epoch) with RTP time `ptsMs` on the
   * node's clock, ms epoch: the time its params are placed by (set as the frame's `capturedAt`).
   */
  placeAt: (capturedAt: number, ptsMs: number) => number;
  /**
   * Null when a frame placed at `at` (placeAt) may take its params now, else a promise to wait for
   * first (bounded by the callee: the audio its params follow, AudioMappings.waitFor); it
   * resolves false when the wait ran out before what it waited for came.
   */
  wait?: (at: number) => Promise<boolean> | null;
  /** Before a frame placed at `at` (ms epoch, placeAt) is processed: the params landings it carries. */
  before: (at: number) => ParamsMark[];
  /** The processor gave no output for a frame: its landings wait for the next output frame. */
  noOutput: (marks: ParamsMark[]) => void;
  /**
   * A processed frame; the callee copies what it keeps (the engine may reuse the buffer after).
   * `ptsMs` and `capturedAt` are those of the frame it was made from (its source's RTP time on
   * the node's clock, and its capture time, ms epoch), whatever the processor set on it.
   */
  output: (frame: Frame, inputAtMs: number, marks: ParamsMark[], ptsMs: number, capturedAt: number) => void;
  /** The processor could not be built, or failed a frame (the stream's lastError). */
  onError: (message: string) => void;
  logger: Logger;
}

interface SlotItem {
  frame: Frame;
  /** performance.now() the decoder handed the frame, and ms it spent decoding it. */
  decodedAtMs: number;
  decodeMs: number;
  /** Capture time on the node's clock, ms epoch. */
  capturedAt: number;
  /** The source frame's `ptsMs` (its RTP time on the node's monotonic clock), which its output keeps. */
  ptsMs: number;
}

export class FrameSlot {
  readonly #opts: FrameSlotOptions;
  readonly #logger: Logger;
  #processor: FrameProcessor | null = null;
  /** The processor being built (it is built with the first publisher that needs one). */
  #loading: Promise<void> | null = null;
  /** Bumped by every params update, so a processor built from older params catches up. */
  #paramsVersion = 0;
  #busy = false;
  #pending: SlotItem | null = null;
  #framesDropped = 0;
  readonly #processT = new StageTimer();
  #closed = false;

  constructor(opts: FrameSlotOptions) {
    this.#opts = opts;
    this.#logger = opts.logger;
  }

  get state(): ProcessorState {
    return this.#processor ? 'ready' : this.#loading ? 'loading' : 'none';
  }

  /** A frame is inside a built processor now. */
  get processing(): boolean {
    return this.#busy && this.#processor !== null;
  }

  /** Decoded frames that never reached the processor (replaced in the slot, or no processor yet). */
  get framesDropped(): number {
    return this.#framesDropped;
  }

  /** ms per processed frame (rolling window and totals). */
  get processTimer(): StageTimer {
    return this.#processT;
  }

  /** Resolves once the processor being built exists; at once when none is being built. */
  ready(): Promise<void> {
    return this.#loading ?? Promise.resolve();
  }

  /** Builds the processor unless it exists or is being built. Params that change meanwhile are applied when it is ready. */
  ensure(): void {
    if (this.#processor || this.#loading || this.#closed) return;
    const version = this.#paramsVersion;
    const built = { ...this.#opts.params() };
    this.#loading = this.#opts
      .createProcessor(built, { streamId: this.#opts.streamId, logger: this.#logger })
      .then((p) => {
        if (this.#isClosed()) {
          p.close();
          return;
        }
        this.#processor = p;
        // Changes taken while it was built: planned here, once, against what it was built from.
        if (this.#paramsVersion !== version) {
          const target = this.#opts.params() as StreamParams;
          p.update({ target, plan: planUpdate(built as StreamParams, target) });
        }
      })
      .catch((err: unknown) => {
        this.#opts.onError(`processor: ${String(err)}`);
        this.#logger.error({ err }, `ensureProcessor() | processor creation failed [streamId:${this.#opts.streamId}]`);
      })
      .finally(() => {
        this.#loading = null;
      });
  }

  /**
   * Hands a params change to the processor (from its next frame) and returns the plan it ran, or
   * null when no processor runs yet (the one built later starts from the latest params). Throws
   * when the engine refuses it.
   */
  update(change: ParamsChange): UpdatePlan | null {
    const plan = this.#processor?.update(change) ?? null;
    this.#paramsVersion++;
    return plan;
  }

  /** A method, not a field read, so TypeScript does not keep a narrowing across awaits. */
  #isClosed(): boolean {
    return this.#closed;
  }

  /** A decoded frame the decoder lends for this call only (copied when kept). */
  push(frame: Frame, decodedAtMs: number, decodeMs: number, capturedAt: number): void {
    if (frame.format !== 'RGB' || !this.#processor) {
      // The decoder is still switching to RGB, or the processor is still being built.
      this.#framesDropped++;
      return;
    }
    frame.data = Buffer.from(frame.data);
    const item = { frame, decodedAtMs, decodeMs, capturedAt, ptsMs: frame.ptsMs };
    if (this.#busy) {
      if (this.#pending) this.#framesDropped++;
      this.#pending = item;
      return;
    }
    void this.#run(item);
  }

  /** The publisher left: the frame waiting in the slot goes with it. */
  clear(): void {
    this.#pending = null;
  }

  async #run(first: SlotItem): Promise<void> {
    this.#busy = true;
    let item: SlotItem | null = first;
    try {
      while (item && !this.#isClosed()) {
        const processor = this.#processor;
        if (!processor) {
          this.#framesDropped++;
        } else {
          const at = this.#opts.placeAt(item.capturedAt, item.ptsMs);
          item.frame.capturedAt = at;
          const wait = this.#opts.wait?.(at);
          if (wait && !(await wait)) item.frame.soundLate = true;
          if (this.#isClosed()) break;
          // Changes due by this frame's time apply before it is processed: it carries them.
          const marks = this.#opts.before(at);
          const t0 = performance.now();
          let out: Frame | null = null;
          try {
            out = await processor.process(item.frame);
          } catch (err) {
            this.#opts.onError(`process: ${String(err)}`);
            this.#logger.warn({ err }, `process() | frame failed [streamId:${this.#opts.streamId}]`);
          }
          this.#processT.add(performance.now() - t0);
          // No output for this frame (dropped by the processor): the next output frame carries them.
          if (!out) this.#opts.noOutput(marks);
          if (out && !this.#isClosed()) {
            this.#opts.output(out, item.decodedAtMs - item.decodeMs, marks, item.ptsMs, item.capturedAt);
            // The encoders copied it: the engine may reuse the buffer (no 786 kB allocation per frame).
            if (out !== item.frame) processor.release?.(out);
          }
        }
        item = this.#pending;
        this.#pending = null;
      }
    } finally {
      this.#busy = false;
    }
  }

  /** The frame pipeline's own status (native FramePipeline: restarts, provider, demo…), or null. */
  pipelineStatus(): Record<string, unknown> | null {
    return this.#processor?.status?.() ?? null;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pending = null;
    this.#processor?.close();
  }
}

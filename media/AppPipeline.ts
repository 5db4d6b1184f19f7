/**
 * The lifecycle every media bin shares: a `gst-launch` description with one `appsrc name=src` and
 * one `appsink name=sink`, built and played at construction, a pull loop that hands each sample to
 * the owner on the main thread, `push`, rate-limited forced key units, and an idempotent `close`.
 * The bins (DecoderBin, EncoderBin, Vp8EncoderBin, AacEncoderBin) only describe their pipeline and
 * what a sample means.
 *
 * One libuv threadpool thread is held by the pending pull for the pipeline's lifetime (see gst.ts);
 * stopping the pipeline (NULL state) flushes the appsink, which ends that pull.
 */
import type { Logger } from 'pino';
import { InvalidStateError, PipelineError } from './errors.ts';
import { loadGst, type GstAppSink, type GstAppSrc, type GstPipeline } from './gst.ts';

export interface AppPipelineOptions {
  /** gst-launch description holding `appsrc name=src` and `appsink name=sink`. */
  launch: string;
  /** What the pipeline is, for errors and logs (e.g. `encoder [codec:VP8]`). */
  what: string;
  logger: Logger;
  /** Called on the main thread with each appsink sample, after the next pull is queued. */
  onSample: (buf: Buffer) => void;
  /** Forced key units closer than this are merged into one deferred request, ms. Default 0. */
  keyUnitMinIntervalMs?: number;
}

export class AppPipeline {
  readonly #pipeline: GstPipeline;
  readonly #src: GstAppSrc;
  readonly #sink: GstAppSink;
  readonly #opts: AppPipelineOptions;
  #closed = false;
  #lastKeyUnitMs = -Infinity;
  #keyUnitTimer: NodeJS.Timeout | undefined;
  /** Buffers pushed into the appsrc. */
  pushed = 0;
  /** Samples handed to onSample. */
  samples = 0;
  /** Forced key units actually sent upstream (after coalescing). */
  keyUnitsForced = 0;

  /** Builds and plays the pipeline; throws PipelineError if it does not build. */
  constructor(opts: AppPipelineOptions) {
    this.#opts = opts;
    try {
      this.#pipeline = new (loadGst().Pipeline)(opts.launch);
    } catch (err) {
      throw new PipelineError(`${opts.what} pipeline failed to build`, { cause: err });
    }
    const src = this.#pipeline.findChild('src');
    const sink = this.#pipeline.findChild('sink');
    if (!src || !sink) throw new PipelineError(`${opts.what} pipeline lacks src/sink`);
    this.#src = src;
    this.#sink = sink;
    this.#pipeline.play();
    this.#pull();
  }

  #pull(): void {
    this.#sink.pull((buf) => {
      if (this.#closed || !buf) return;
      // Queue the next pull first: the appsink keeps filling its bounded queue meanwhile.
      this.#pull();
      this.samples++;
      this.#opts.onSample(buf);
    });
  }

  /** Copies `data` into the appsrc (its own bound decides what is dropped). */
  push(data: Uint8Array): void {
    if (this.#closed) throw new InvalidStateError(`${this.#opts.what} closed`);
    this.pushed++;
    this.#src.push(data);
  }

  /**
   * Asks the encoder for a key unit (an upstream GstForceKeyUnit event from the appsink's pad).
   * Requests inside keyUnitMinIntervalMs of the last one are coalesced into one deferred request.
   */
  requestKeyUnit(): void {
    if (this.#closed || this.#keyUnitTimer) return;
    const wait = this.#lastKeyUnitMs + (this.#opts.keyUnitMinIntervalMs ?? 0) - performance.now();
    if (wait <= 0) {
      this.#forceKeyUnit();
      return;
    }
    this.#keyUnitTimer = setTimeout(() => {
      this.#keyUnitTimer = undefined;
      this.#forceKeyUnit();
    }, wait);
  }

  #forceKeyUnit(): void {
    if (this.#closed) return;
    this.#lastKeyUnitMs = performance.now();
    this.keyUnitsForced++;
    this.#pipeline.forceKeyUnit('sink', this.keyUnitsForced);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Stops the pipeline (NULL state); idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#keyUnitTimer);
    try {
      this.#pipeline.stop();
    } catch (err) {
      this.#opts.logger.warn({ err }, `close() | pipeline stop failed [what:${this.#opts.what}]`);
    }
  }
}

/**
 * The lifecycle every media bin shares: a `gst-launch` description with one `appsrc name=src` and
 * one `appsink name=sink`, built and played at construction, a pull loop that hands each sample to
 * the owner on the main thread, `push`, rate-limited forced key units, and an idempotent `close`.
 * The bins (DecoderBin, EncoderBin, Vp8EncoderBin, AacEncoderBin) only describe their pipeline and
 * what a sample means.
 *
 * Samples arrive through the addon's appsink callback (gst.ts): no Node thread waits on the
 * pipeline, and the appsink's own bounds (max-buffers, drop) decide what is kept while Node is busy.
 * A bus error (a decoder that gave up on its input, an encoder that failed) reaches `onError` once;
 * the pipeline has stopped by then and its owner decides whether to build a new one.
 */
import type { Logger } from 'pino';
import { InvalidStateError, PipelineError } from '../errors.ts';
import { loadGst, type GstHandle } from './gst.ts';

export interface AppPipelineOptions {
  /** gst-launch description holding `appsrc name=src` and `appsink name=sink`. */
  launch: string;
  /** What the pipeline is, for errors and logs (e.g. `encoder [codec:VP8]`). */
  what: string;
  logger: Logger;
  /** Called on the main thread with each appsink sample and its PTS (ns; -1: none), in order. */
  onSample: (buf: Buffer, pts: number) => void;
  /**
   * The Buffer given to onSample is only valid during the call (it views the sample's memory and
   * is emptied afterwards): no copy per sample. For large samples consumed at once. Default false.
   */
  borrowSamples?: boolean;
  /**
   * Nice value of the pipeline's streaming threads (Linux; 0 = the process's). Codecs run below
   * the JS thread, which receives every stream's packets: under overload a codec drops frames,
   * never the network. Default 0.
   */
  nice?: number;
  /** Called once, on the main thread, when the pipeline posts an error (it no longer runs). */
  onError?: (message: string) => void;
  /** Forced key units closer than this are merged into one deferred request, ms. Default 0. */
  keyUnitMinIntervalMs?: number;
  /**
   * Of the samples that reach Node together, skip those stamped more than this before the newest
   * of them, ns (counted in `skipped`). A burst pushed at once carries one stamp and passes whole;
   * a backlog that built up while Node was busy passes only its newest. Default: none skipped.
   */
  staleAfterNs?: number;
}

export class AppPipeline {
  readonly #handle: GstHandle;
  readonly #opts: AppPipelineOptions;
  #closed = false;
  #lastKeyUnitMs = -Infinity;
  #keyUnitTimer: NodeJS.Timeout | undefined;
  /** Buffers pushed into the appsrc. */
  pushed = 0;
  /** Samples handed to onSample. */
  samples = 0;
  /** Samples skipped as stale (staleAfterNs). */
  skipped = 0;
  /** Forced key units actually sent upstream (after coalescing). */
  keyUnitsForced = 0;
  /** The bus error that stopped the pipeline, if one did. */
  error: string | undefined;

  /** Builds and plays the pipeline; throws PipelineError if it does not build. */
  constructor(opts: AppPipelineOptions) {
    this.#opts = opts;
    try {
      this.#handle = loadGst().create(
        opts.launch,
        (bufs, pts) => {
          const newest = pts[pts.length - 1] ?? -1;
          for (let i = 0; i < bufs.length; i++) {
            if (this.#closed) return;
            const at = pts[i] ?? -1;
            if (opts.staleAfterNs !== undefined && at >= 0 && newest >= 0 && newest - at > opts.staleAfterNs) {
              this.skipped++;
              continue;
            }
            this.samples++;
            opts.onSample(bufs[i]!, at);
          }
        },
        (message) => this.#onError(message),
        opts.borrowSamples === true,
        opts.nice ?? 0,
      );
    } catch (err) {
      throw new PipelineError(`${opts.what} pipeline failed to build`, { cause: err });
    }
  }

  #onError(message: string): void {
    if (this.#closed || this.error !== undefined) return;
    this.error = message;
    this.#opts.logger.warn(`AppPipeline | pipeline error [what:${this.#opts.what}] [error:${message}]`);
    this.#opts.onError?.(message);
  }

  /**
   * Copies `data` into the appsrc (its own bound decides what is dropped). With `stamp`, returns
   * the PTS (ns) it was given, which the sample made of it carries (-1: refused); else 0. With
   * `keyUnit`, the encoder makes this buffer a key unit (not rate-limited: the caller decides).
   */
  push(data: Uint8Array, stamp = false, keyUnit = false): number {
    if (this.#closed) throw new InvalidStateError(`${this.#opts.what} closed`);
    this.pushed++;
    if (keyUnit) this.keyUnitsForced++;
    return loadGst().push(this.#handle, data, stamp, keyUnit);
  }

  /** Sets the `caps` of the named element (an appsrc or capsfilter); applies from the next buffer. */
  setCaps(element: string, caps: string): void {
    if (this.#closed) throw new InvalidStateError(`${this.#opts.what} closed`);
    loadGst().setCaps(this.#handle, element, caps);
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
    loadGst().forceKeyUnit(this.#handle, this.keyUnitsForced);
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
      loadGst().close(this.#handle);
    } catch (err) {
      this.#opts.logger.warn({ err }, `close() | pipeline stop failed [what:${this.#opts.what}]`);
    }
  }
}

/**
 * Gives the memory a closed stream freed back to the kernel.
 *
 * A stream's decoders, encoders, frame buffers, ICE/DTLS sessions and (with diffusion) its worker
 * thread's tensors are malloc'd by many threads into a few glibc arenas (`MALLOC_ARENA_MAX=2` in
 * our launchers). glibc returns a heap's memory only from its top: a freed block below a block
 * that still lives stays resident. With streams coming and going for hours, that kept the
 * process at what its busiest minute needed and crept up as the free space fragmented (the soak,
 * docs/performance.md). `malloc_trim(0)` walks every arena and hands whole free pages back
 * (MADV_DONTNEED), wherever they are.
 *
 * When: a short while after a stream closes (a burst of closes gives one trim), and on a slow
 * timer while the node runs (churn inside streams frees memory too: viewers, reloads). A trim
 * takes well under a millisecond on an idle heap and a few ms on a large one, holding each
 * arena's lock while it walks it; the next malloc of a trimmed page faults it in again.
 */
import type { Logger } from 'pino';
import { loadGst } from './gst.ts';

export interface MemoryTrimOptions {
  /** Trim this long after a stream closed; a close inside it pushes it back, ms. */
  afterCloseMs: number;
  /** Trim at least this often while the node runs, ms (0: only after closes). */
  intervalMs: number;
  logger: Logger;
}

export class MemoryTrim {
  readonly #opts: MemoryTrimOptions;
  #afterClose: NodeJS.Timeout | undefined;
  readonly #interval: NodeJS.Timeout | undefined;
  #closed = false;
  /** Trims done. */
  trims = 0;
  /** Resident bytes the trims gave back (RSS before − after, each trim; ≥ 0). */
  releasedBytes = 0;
  /** Time spent trimming, seconds. */
  seconds = 0;

  constructor(opts: MemoryTrimOptions) {
    this.#opts = opts;
    if (opts.intervalMs > 0) {
      this.#interval = setInterval(() => this.trim('interval'), opts.intervalMs);
      this.#interval.unref();
    }
  }

  /** A stream closed: trim once the closes around it are over. */
  streamClosed(): void {
    if (this.#closed) return;
    clearTimeout(this.#afterClose);
    this.#afterClose = setTimeout(() => this.trim('stream closed'), this.#opts.afterCloseMs);
    this.#afterClose.unref();
  }

  /** Trims now; returns the resident bytes given back. */
  trim(why: string): number {
    if (this.#closed) return 0;
    const before = process.memoryUsage.rss();
    const t0 = performance.now();
    try {
      loadGst().trimMemory();
    } catch (err) {
      this.#opts.logger.warn({ err }, 'trim() | malloc_trim failed');
      return 0;
    }
    const ms = performance.now() - t0;
    const released = Math.max(0, before - process.memoryUsage.rss());
    this.trims++;
    this.releasedBytes += released;
    this.seconds += ms / 1000;
    this.#opts.logger.debug(`trim() | [why:${why}] [released:${(released / 2 ** 20).toFixed(1)} MiB] [ms:${ms.toFixed(2)}]`);
    return released;
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#afterClose);
    clearInterval(this.#interval);
  }
}

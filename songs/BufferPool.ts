/**
 * The mixer's big buffers kept between renders in one thread (≈ 23 MB each at 120 s: the bus,
 * sends, part and limiter buffers on every render, ≈ 12 × 23 MB; the stem and gain buffers, 10 more,
 * with stems). Fresh memory costs ≈ 3.5 ms per MB to first touch on our VMs, and freeing the last
 * render's buffers took a major GC, often right before the first MP3 byte. Kept pages stay cheap
 * only because this process never forks while it renders (LAME is started by EncoderHost).
 * A render leases the thread's pool and gives it back when it no longer reads the buffers; a
 * second render in the same thread while the first holds it (two awaited renders interleaving)
 * gets a pool of its own that is dropped after it.
 */
export class BufferPool {
  static readonly #thread = new BufferPool();
  readonly #bufs: Float32Array[] = [];
  #busy = false;

  /** This thread's pool if free, else a fresh one; call release() when done with its buffers. */
  static lease(): BufferPool {
    const p = BufferPool.#thread.#busy ? new BufferPool() : BufferPool.#thread;
    p.#busy = true;
    return p;
  }

  release(): void {
    this.#busy = false;
  }

  /** Buffer `k`, `len` long; zeroed when `zero` (buffers the caller writes in full skip the memset). */
  get(k: number, len: number, zero: boolean): Float32Array {
    let b = this.#bufs[k];
    if (!b || b.length < len) {
      b = new Float32Array(len);
      this.#bufs[k] = b;
      return b;
    }
    if (zero) b.fill(0, 0, len);
    return b.subarray(0, len);
  }
}

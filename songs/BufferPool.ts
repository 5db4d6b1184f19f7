/**
 * Stem and gain buffers kept between stem renders in one thread (10 × ≈ 23 MB at 120 s). Fresh
 * memory costs ≈ 3.5 ms per MB to first touch on our VMs; note that every LAME spawn (a fork)
 * makes the next write to each kept page fault once too, so reuse saves the allocation more than
 * the page faults.
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

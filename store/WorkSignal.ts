/**
 * Wakes `waitForWork` callers of one process when a queue may have work. Both stores feed it:
 * the embedded store after its own commits, the Redis store from its notify channel.
 */
export class WorkSignal {
  private readonly waiters = new Map<string, Set<() => void>>();
  private closed = false;

  wait(queue: string, maxWaitMs: number, signal?: AbortSignal): Promise<void> {
    if (this.closed || signal?.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let set = this.waiters.get(queue);
      if (!set) {
        set = new Set();
        this.waiters.set(queue, set);
      }
      const waiters = set;
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        waiters.delete(done);
        if (waiters.size === 0 && this.waiters.get(queue) === waiters) this.waiters.delete(queue);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, maxWaitMs));
      signal?.addEventListener('abort', done, { once: true });
      waiters.add(done);
    });
  }

  notify(queue: string): void {
    const set = this.waiters.get(queue);
    if (!set) return;
    for (const done of [...set]) done();
  }

  /** Releases every waiter; later waits resolve at once. */
  close(): void {
    this.closed = true;
    for (const set of [...this.waiters.values()]) for (const done of [...set]) done();
    this.waiters.clear();
  }
}

/**
 * Polls `read` until `ok` holds for what it returned, and returns that value; throws, naming
 * `what` and the last value read, after `timeoutMs`. Every step waits `stepMs` (default 100 ms).
 */
export async function until<T>(what: string, read: () => T | Promise<T>, ok: (v: T) => boolean, timeoutMs: number, stepMs = 100): Promise<T> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (performance.now() > end) throw new Error(`${what}: not within ${timeoutMs} ms (last: ${JSON.stringify(v)})`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

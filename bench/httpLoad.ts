/**
 * Closed-loop HTTP load from a worker thread, so the load generator's CPU does not compete with
 * the server's event loop (on 2 cores, each gets one). `httpLoad()` runs it and resolves with
 * the latencies; the worker side is this same file.
 */
import { Agent, request } from 'node:http';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

export interface LoadSpec {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  seconds: number;
  connections: number;
  /** Status counted as success (default 200). */
  okStatus?: number;
  /**
   * A request not answered in full within this many ms is abandoned (its socket destroyed) and
   * counted as an error, so one hung request cannot hold its connection, and the round, open.
   * Default 10 000 ms: far above any latency a healthy server on loopback shows under this load.
   */
  timeoutMs?: number;
}

export interface LoadResult {
  /** Requests answered in full (any status); their latencies are in `latenciesMs`. */
  requests: number;
  /** Answers with a status other than `okStatus`, failed requests and timed-out ones. */
  errors: number;
  /** Of `errors`, the requests abandoned after `timeoutMs`. */
  timeouts: number;
  rps: number;
  latenciesMs: number[];
}

async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: spec.connections });
  const latenciesMs: number[] = [];
  let errors = 0;
  let timeouts = 0;
  const timeoutMs = spec.timeoutMs ?? 10_000;
  const end = performance.now() + spec.seconds * 1000;
  const one = () =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      let settled = false;
      // Exactly one outcome per request: answered (with its status), failed, or timed out.
      const settle = (outcome: 'answered' | 'failed' | 'timedOut', status?: number) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (outcome === 'answered') {
          if (status !== (spec.okStatus ?? 200)) errors++;
          latenciesMs.push(performance.now() - t0);
        } else {
          errors++;
          if (outcome === 'timedOut') timeouts++;
        }
        resolve();
      };
      const req = request(spec.url, { agent, method: spec.method ?? 'GET', headers: spec.headers }, (res) => {
        res.resume();
        res.on('end', () => settle('answered', res.statusCode));
        res.on('error', () => settle('failed'));
      });
      req.on('error', () => settle('failed'));
      const timer = setTimeout(() => {
        settle('timedOut');
        req.destroy();
      }, timeoutMs);
      req.end(spec.body);
    });
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: spec.connections }, async () => {
      while (performance.now() < end) await one();
    }),
  );
  const elapsed = (performance.now() - t0) / 1000;
  agent.destroy();
  return { requests: latenciesMs.length, errors, timeouts, rps: latenciesMs.length / elapsed, latenciesMs };
}

/** Runs `spec` in a worker thread and returns its result. */
export function httpLoad(spec: LoadSpec): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    // Node 20 does not apply tsx's hooks from a worker's execArgv: register them inside the worker.
    const api = import.meta.resolve('tsx/esm/api');
    const code = `import(${JSON.stringify(api)}).then((t) => { t.register(); return import(${JSON.stringify(import.meta.url)}); })`;
    const worker = new Worker(code, { eval: true, workerData: spec });
    worker.once('message', (r: LoadResult) => resolve(r));
    worker.once('error', reject);
    worker.once('exit', (code) => {
      if (code !== 0) reject(new Error(`load worker exited ${code}`));
    });
  });
}

if (!isMainThread && parentPort) {
  parentPort.postMessage(await runLoad(workerData as LoadSpec));
}

/**
 * Worker-thread entry hosting one StreamEngine (started by EngineThread). ONNX Runtime's session
 * creation and `run` are synchronous on the calling thread, so each pipeline gets a thread of its
 * own: the media node's event loop (RTP, HTTP) never waits on inference, and a reload builds its
 * new pipeline in a second thread while this one keeps serving.
 *
 * Protocol (one request at a time per id, replies in the order handled):
 *   → { op: 'open', id, opts } | { op: 'process', id, frame, returned } | { op: 'update', id, change }
 *     | { op: 'prime', id, frame } | { op: 'idle', id } | { op: 'close', id } | { op: 'fetched', id, data | error }
 *   ← { op: 'reply', id, value, status } | { op: 'reply', id, error } | { op: 'fetch', id, url, limits } | { op: 'log', line }
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parentPort } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import pino, { type Logger } from 'pino';
import type { Frame } from './Frame.ts';
import type { FetchImage } from './IpAdapter.ts';
import { StreamEngine } from './StreamEngine.ts';
import type { HostRequest, ProcessReply, WorkerMessage, WorkerOpenOptions } from './EngineThread.ts';

// ORT logs a provider-library error while a worker's environment is torn down (the CPU build
// has no providers_shared library); real failures still throw.
ort.env.logLevel = 'fatal';

/**
 * A full collection after a build: loading leaves megabytes of protobuf objects and model bytes
 * (FusedVae) in the old generation, and their major GC otherwise lands on the first frames this
 * thread serves after a swap (measured: the 2nd frame after a swap took 19–23 ms to decode
 * against 7). The usual way to reach `gc` without starting Node with --expose-gc.
 */
setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

const port = parentPort;
if (!port) throw new Error('EngineWorker must run in a worker thread');

let pipeline: StreamEngine | null = null;
let nextFetch = 0;
const fetches = new Map<number, { resolve: (b: Buffer) => void; reject: (e: Error) => void }>();

const post = (m: WorkerMessage, transfer: ArrayBuffer[] = []) => port.postMessage(m, transfer);

/** Style-image downloads go through the host's (SSRF-safe) client. */
const fetchImage: FetchImage = (url, limits) =>
  new Promise((resolve, reject) => {
    const id = nextFetch++;
    fetches.set(id, { resolve, reject });
    post({ op: 'fetch', id, url, limits });
  });

function loggerFor(o: WorkerOpenOptions): Logger {
  // Lines go to the host, which writes them through the caller's logger.
  return pino({ level: o.logLevel, base: null, timestamp: false }, { write: (line: string) => post({ op: 'log', line }) });
}

function open(): StreamEngine {
  if (!pipeline) throw new Error('pipeline not opened');
  return pipeline;
}

/** A buffer we may transfer: a whole ArrayBuffer, not a view into a larger one. */
function ownBuffer(f: Frame): ArrayBuffer[] {
  const b = f.data.buffer;
  return b instanceof ArrayBuffer && f.data.byteOffset === 0 && f.data.byteLength === b.byteLength ? [b] : [];
}

async function handle(m: HostRequest): Promise<void> {
  if (m.op === 'fetched') {
    const f = fetches.get(m.id);
    fetches.delete(m.id);
    if (m.data) f?.resolve(Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength));
    else f?.reject(new Error(m.error ?? 'fetch failed'));
    return;
  }
  try {
    switch (m.op) {
      case 'open': {
        const { logLevel: _level, canFetch, ...rest } = m.opts;
        // The host checked these params (FramePipeline): the engine takes them as they are.
        pipeline = await StreamEngine.open({ ...rest, logger: loggerFor(m.opts), ...(canFetch ? { fetchImage } : {}) }, rest.params);
        post({ op: 'reply', id: m.id, value: null, status: pipeline.status() });
        return;
      }
      case 'process': {
        const p = open();
        for (const data of m.returned) p.release({ width: 0, height: 0, ptsMs: 0, data });
        const out = await p.process(m.frame);
        // The input buffer goes back for the host's next frame, unless it is the output itself
        // (passthrough). Nothing in the pipeline keeps a reference to its input.
        const input = out && out.data.buffer === m.frame.data.buffer ? null : m.frame.data;
        const value: ProcessReply = { frame: out, input };
        post({ op: 'reply', id: m.id, value, status: p.status() }, [...(out ? ownBuffer(out) : []), ...(input ? ownBuffer(m.frame) : [])]);
        return;
      }
      case 'update':
        post({ op: 'reply', id: m.id, value: open().update(m.change), status: open().status() });
        return;
      case 'prime':
        await open().prime(m.frame);
        collect();
        post({ op: 'reply', id: m.id, value: null, status: open().status() });
        return;
      case 'idle':
        await open().whenIdle();
        post({ op: 'reply', id: m.id, value: null, status: open().status() });
        return;
      case 'close':
        // The thread stays: the host may open another pipeline here (a reload's spare).
        await pipeline?.close();
        pipeline = null;
        post({ op: 'reply', id: m.id, value: null });
        return;
    }
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    post({ op: 'reply', id: m.id, error: { name: e.name, message: e.message, code: (e as { code?: string }).code ?? null } });
  }
}

port.on('message', (m: HostRequest) => void handle(m));

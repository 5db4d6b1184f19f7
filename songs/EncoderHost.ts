/**
 * A small helper process, one per thread, that starts the LAME encoders and relays their pipes.
 *
 * Why: starting a child from the render process forks it, and after a fork every page that the
 * process then writes faults once more (copy-on-write protection, even though the child execs at
 * once). On our VMs that costs ≈ 25 µs per 4 KiB page: rewriting 240 MB of kept stem buffers took
 * 1.6–2.1 s of CPU after one `spawn('true')` against 20 ms without it. One LAME per take meant one
 * fork per take, paid on every pooled buffer and on the V8 heap, and most of it before the first
 * MP3 byte. The helper is forked once (started early, while the process is small: prewarm()), and
 * it forks LAME from its own small address space.
 *
 * The helper is plain JavaScript run with `node -e` (no TypeScript loader: it starts in ≈ 40 ms).
 * Frames on its stdin and stdout: type (1 byte), job id (u32 LE), payload length (u32 LE), payload.
 * In: `S` start (payload: JSON argv, binary first), `D` data for the job's stdin, `E` end of its
 * stdin, `K` kill. Out: `O` the job's stdout bytes, in order; `X` the job ended (payload: JSON
 * `{ code, signal, stderr, error }`, `error` set when the binary could not be started).
 */
import { spawn, type ChildProcess } from 'node:child_process';

const HEADER = 9;

/** The helper's source (CommonJS, run by `node -e`). */
const HOST_SOURCE = String.raw`
const { spawn } = require('node:child_process');
const jobs = new Map();
function send(type, id, payload) {
  const h = Buffer.allocUnsafe(9);
  h[0] = type.charCodeAt(0);
  h.writeUInt32LE(id, 1);
  h.writeUInt32LE(payload.length, 5);
  process.stdout.write(h);
  if (payload.length > 0) process.stdout.write(payload);
}
function start(id, argv) {
  const child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
  const err = [];
  let failed = null;
  jobs.set(id, child);
  child.stdout.on('data', (c) => send('O', id, c));
  child.stderr.on('data', (c) => err.push(c));
  child.stdin.on('error', () => {});
  child.on('error', (e) => { failed = String(e && e.message); });
  child.on('close', (code, signal) => {
    jobs.delete(id);
    send('X', id, Buffer.from(JSON.stringify({ code, signal, stderr: Buffer.concat(err).toString('utf8').slice(0, 400), error: failed })));
  });
}
let head = Buffer.alloc(0);
let type = '';
let id = 0;
let left = -1;
let body = [];
function frame(t, j, payload) {
  if (t === 'S') start(j, JSON.parse(payload.toString('utf8')));
  else if (t === 'E') { const c = jobs.get(j); if (c) c.stdin.end(); }
  else if (t === 'K') { const c = jobs.get(j); if (c) c.kill('SIGKILL'); }
}
process.stdin.on('data', (chunk) => {
  let at = 0;
  while (at < chunk.length) {
    if (left < 0) {
      const need = 9 - head.length;
      head = Buffer.concat([head, chunk.subarray(at, at + need)]);
      at += Math.min(need, chunk.length - at);
      if (head.length < 9) return;
      type = String.fromCharCode(head[0]);
      id = head.readUInt32LE(1);
      left = head.readUInt32LE(5);
      head = Buffer.alloc(0);
      body = [];
    }
    const take = Math.min(left, chunk.length - at);
    const piece = chunk.subarray(at, at + take);
    at += take;
    left -= take;
    if (type === 'D') { const c = jobs.get(id); if (c && take > 0) c.stdin.write(piece); }
    else if (take > 0) body.push(piece);
    if (left === 0) {
      left = -1;
      if (type !== 'D') frame(type, id, Buffer.concat(body));
    }
  }
});
function quit() {
  for (const c of jobs.values()) c.kill('SIGKILL');
  process.exit(0);
}
process.stdin.on('end', quit);
// EPIPE: the thread that started us is gone (a pool closed mid-take); its encoders go with us.
process.stdout.on('error', quit);
`;

/** How a job ended. `error`: the binary could not be started (its message). */
export interface HostedExit {
  code: number | null;
  signal: string | null;
  stderr: string;
  error: string | null;
}

/** One process started through the host: write its stdin, receive its stdout and its end. */
export interface HostedJob {
  write(piece: Buffer): void;
  end(): void;
  kill(): void;
}

interface JobHandlers {
  onStdout: (chunk: Buffer) => void;
  onExit: (exit: HostedExit) => void;
}

/** The thread's encoder host. Started on first use or by prewarm(); restarted if it dies. */
export class EncoderHost {
  static #thread: EncoderHost | null = null;
  readonly #child: ChildProcess;
  readonly #jobs = new Map<number, JobHandlers>();
  #nextId = 1;
  #dead = false;

  /** This thread's host (started now if it is not running). */
  static get(): EncoderHost {
    if (!EncoderHost.#thread || EncoderHost.#thread.#dead) EncoderHost.#thread = new EncoderHost();
    return EncoderHost.#thread;
  }

  /** Starts the host while the process is still small (render threads call it at start-up). */
  static prewarm(): void {
    EncoderHost.get();
  }

  private constructor() {
    // NODE_OPTIONS cleared: a `--import tsx` there would load the TypeScript loader into the helper for nothing.
    const child = spawn(process.execPath, ['-e', HOST_SOURCE], { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, NODE_OPTIONS: '' } });
    this.#child = child;
    let head = Buffer.alloc(0);
    let type = '';
    let id = 0;
    let left = -1;
    let body: Buffer[] = [];
    child.stdout!.on('data', (chunk: Buffer) => {
      let at = 0;
      while (at < chunk.length) {
        if (left < 0) {
          const need = HEADER - head.length;
          head = Buffer.concat([head, chunk.subarray(at, at + need)]);
          at += Math.min(need, chunk.length - at);
          if (head.length < HEADER) return;
          type = String.fromCharCode(head[0] as number);
          id = head.readUInt32LE(1);
          left = head.readUInt32LE(5);
          head = Buffer.alloc(0);
          body = [];
        }
        const take = Math.min(left, chunk.length - at);
        const piece = chunk.subarray(at, at + take);
        at += take;
        left -= take;
        if (type === 'O') {
          if (take > 0) this.#jobs.get(id)?.onStdout(piece);
        } else if (take > 0) body.push(piece);
        if (left === 0) {
          left = -1;
          if (type === 'X') this.#exited(id, JSON.parse(Buffer.concat(body).toString('utf8')) as HostedExit);
        }
      }
    });
    const died = (why: string) => {
      if (this.#dead) return;
      this.#dead = true;
      const jobs = [...this.#jobs.entries()];
      this.#jobs.clear();
      for (const [, h] of jobs) h.onExit({ code: null, signal: null, stderr: '', error: `encoder host ${why}` });
    };
    child.on('error', (e) => died(`failed: ${e.message}`));
    child.on('exit', (code, signal) => died(`exited [code:${code}] [signal:${signal}]`));
    child.stdin!.on('error', () => {
      // EPIPE when the host died; reported by 'exit'.
    });
    this.#idle();
  }

  /** Starts `argv` (binary first) in the host. */
  start(argv: readonly string[], handlers: JobHandlers): HostedJob {
    const id = this.#nextId++;
    if (this.#dead) {
      queueMicrotask(() => handlers.onExit({ code: null, signal: null, stderr: '', error: 'encoder host is not running' }));
      return { write: () => {}, end: () => {}, kill: () => {} };
    }
    this.#jobs.set(id, handlers);
    this.#busy();
    this.#send('S', id, Buffer.from(JSON.stringify(argv)));
    return {
      write: (piece) => this.#send('D', id, piece),
      end: () => this.#send('E', id, Buffer.alloc(0)),
      kill: () => this.#send('K', id, Buffer.alloc(0)),
    };
  }

  #send(type: string, id: number, payload: Buffer): void {
    if (this.#dead || payload.length === 0 && type === 'D') return;
    const h = Buffer.allocUnsafe(HEADER);
    h[0] = type.charCodeAt(0);
    h.writeUInt32LE(id, 1);
    h.writeUInt32LE(payload.length, 5);
    this.#child.stdin!.write(h);
    // Queued without a copy: callers do not change a piece after writing it.
    if (payload.length > 0) this.#child.stdin!.write(payload);
  }

  #exited(id: number, exit: HostedExit): void {
    const h = this.#jobs.get(id);
    this.#jobs.delete(id);
    if (this.#jobs.size === 0) this.#idle();
    h?.onExit(exit);
  }

  // An idle host must not keep the thread (or the process) alive; a running job must.
  #busy(): void {
    this.#child.ref();
    (this.#child.stdout as unknown as { ref(): void }).ref();
    (this.#child.stdin as unknown as { ref(): void }).ref();
  }

  #idle(): void {
    this.#child.unref();
    (this.#child.stdout as unknown as { unref(): void }).unref();
    (this.#child.stdin as unknown as { unref(): void }).unref();
  }
}

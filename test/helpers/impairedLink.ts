/**
 * An impaired network link between two namespaces, as a mobile or Wi-Fi link is in the field:
 * one-way delay, jitter that reorders packets, random loss and a rate limit with a bounded queue,
 * set per direction and changeable while traffic flows. `tc netem` is not in every kernel
 * (CONFIG_NET_SCH_NETEM), so the link is a TUN device in each namespace joined by a small
 * forwarder in user space (impairedLink.c, compiled with `cc` on first use and cached in the temp
 * directory). Made by a lab (netns.ts), which removes it on teardown:
 *
 *   const lab = await createLab(t, 9, ['srv', 'view']);
 *   const link = await lab.impairedLink({ ns: 'srv', addr: lab.ip(0, 1) }, { ns: 'view', addr: lab.ip(0, 2) },
 *     { delayMs: 40, jitterMs: 10, lossPercent: 3 });                  // both directions: 80 ms RTT
 *   await link.set('ab', { rateKbps: 600 });                           // srv → view only: 600 kb/s
 *   const { ab, ba } = await link.stats();                             // packets received, lost, sent…
 *
 * Direction `ab` carries what the first end sends to the second; `ba` the reverse.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const exec = promisify(execFile);
const SOURCE = fileURLToPath(new URL('./impairedLink.c', import.meta.url));

/** What one direction of the link does to each packet. Unset fields keep their current value. */
export interface Impairment {
  /** One-way delay, ms. Default 0. */
  delayMs?: number;
  /** Each packet's delay varies uniformly within ± this, ms, so packets overtake each other (netem's jitter). Default 0. */
  jitterMs?: number;
  /** Random loss, percent of packets, each packet on its own. Default 0. */
  lossPercent?: number;
  /** Rate limit, kbit/s (a token bucket holding one packet: the link serialises); 0 = none. Default 0. */
  rateKbps?: number;
  /** Queue before the rate limit, bytes; packets beyond it are dropped (tail drop). Default 64 KiB (≈ 870 ms at 600 kb/s). */
  queueBytes?: number;
}

/** Counters of one direction since the link was made. */
export interface DirectionStats {
  /** Packets read from the sending end. */
  received: number;
  /** Dropped by the random loss. */
  lost: number;
  /** Dropped because the rate limit's queue was full. */
  queueDrops: number;
  /** Dropped because too many packets were in the delay line (16,384: a safety bound, not a setting). */
  overflow: number;
  /** Packets delivered to the receiving end, and their bytes (IP headers included). */
  sent: number;
  sentBytes: number;
  writeErrors: number;
  /** Bytes waiting for the rate limit, and packets in the delay line, now. */
  queuedBytes: number;
  inFlight: number;
}

export type Direction = 'ab' | 'ba' | 'both';

let compiled: Promise<string> | undefined;

/** Compiles the forwarder once per source version (cached across processes in the temp directory). */
export function forwarderBinary(): Promise<string> {
  compiled ??= (async () => {
    const hash = createHash('sha256').update(readFileSync(SOURCE)).digest('hex').slice(0, 12);
    const bin = join(tmpdir(), `reverie-impaired-link-${hash}`);
    if (existsSync(bin)) return bin;
    const partial = `${bin}.${process.pid}.part`;
    await exec('cc', ['-O2', '-Wall', '-o', partial, SOURCE]);
    renameSync(partial, bin); // atomic: a parallel test file sees the whole binary or none
    return bin;
  })();
  return compiled;
}

function settings(imp: Impairment): string {
  const kv: string[] = [];
  if (imp.delayMs !== undefined) kv.push(`delay=${imp.delayMs}`);
  if (imp.jitterMs !== undefined) kv.push(`jitter=${imp.jitterMs}`);
  if (imp.lossPercent !== undefined) kv.push(`loss=${imp.lossPercent}`);
  if (imp.rateKbps !== undefined) kv.push(`rate=${imp.rateKbps}`);
  if (imp.queueBytes !== undefined) kv.push(`queue=${imp.queueBytes}`);
  return kv.join(' ');
}

export class ImpairedLink {
  readonly #child: ChildProcess;
  readonly #replies: ((line: string) => void)[] = [];
  readonly #exited: Promise<void>;
  #stderr = '';

  private constructor(child: ChildProcess) {
    this.#child = child;
    this.#exited = new Promise((resolve) => child.once('exit', () => resolve()));
    child.stderr?.on('data', (d: Buffer) => (this.#stderr = (this.#stderr + d.toString()).slice(-2000)));
    createInterface({ input: child.stdout! }).on('line', (line) => this.#replies.shift()?.(line));
    child.once('exit', (code, signal) => {
      for (const reply of this.#replies.splice(0)) reply(`error forwarder exited (${code ?? signal}): ${this.#stderr.trim()}`);
    });
  }

  /**
   * Starts the forwarder between `netnsA`/`devA` and `netnsB`/`devB` (namespace paths) with its
   * PRNG seeded by `seed` (the same seed, the same losses). Resolves when both devices exist,
   * still down and without addresses: the lab configures them.
   */
  static async start(netnsA: string, devA: string, netnsB: string, devB: string, seed: number): Promise<ImpairedLink> {
    const bin = await forwarderBinary();
    const link = new ImpairedLink(spawn(bin, [netnsA, devA, netnsB, devB, String(seed)], { stdio: ['pipe', 'pipe', 'pipe'] }));
    await link.#request(null);
    return link;
  }

  /** The process, for whoever must kill it on teardown. */
  get child(): ChildProcess {
    return this.#child;
  }

  async #request(line: string | null): Promise<string> {
    const reply = new Promise<string>((resolve) => this.#replies.push(resolve));
    if (line !== null) this.#child.stdin?.write(`${line}\n`);
    const got = await reply;
    if (got.startsWith('error')) throw new Error(`impaired link: ${got}`);
    return got;
  }

  /** Changes one direction's (or both directions') impairment now; packets already queued keep theirs. */
  async set(direction: Direction, imp: Impairment): Promise<void> {
    const kv = settings(imp);
    if (kv) await this.#request(`set ${direction} ${kv}`);
  }

  async stats(): Promise<{ ab: DirectionStats; ba: DirectionStats }> {
    return JSON.parse(await this.#request('stats')) as { ab: DirectionStats; ba: DirectionStats };
  }

  /** Ends the forwarder; its devices, and the routes through them, go with it. */
  async close(): Promise<void> {
    this.#child.stdin?.end();
    const killer = setTimeout(() => this.#child.kill('SIGKILL'), 2_000);
    await this.#exited;
    clearTimeout(killer);
  }
}

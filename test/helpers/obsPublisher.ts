/**
 * Drives OBS-like WHIP publishers (fixtures/obsPublisherChild.ts: libdatachannel, H.264 42e01f,
 * no candidates in the offer, never trickles) in one child process, optionally inside a network
 * namespace. Used by the network and capacity tests and by the capacity benchmark.
 *
 *   const pubs = startObsPublishers(t, { netns: 'rv-pub' });
 *   const p = await pubs.publish({ url: whipUrl, token: streamKey, source: await stampedH264() });
 *   await pubs.waitState(p.id, 'connected', 10_000);
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** libdatachannel's ICE server form: a URL string (`stun:host:port`) or fields. */
export type ObsIceServer = string | { hostname: string; port: number; username?: string; password?: string; relayType?: 'TurnUdp' | 'TurnTcp' | 'TurnTls' };

export interface PublishOptions {
  url: string;
  token: string;
  /** Annex B file from `stampedH264()`. */
  source: string;
  /** Default 30. */
  fps?: number;
  iceServers?: ObsIceServer[];
  /** Use the STUN/TURN servers of the server's Link headers, as OBS does (see the fixture). */
  iceServersFromLink?: boolean;
  /** Local address libdatachannel binds to. */
  bindAddress?: string;
  /** Local address of the WHIP HTTP requests (127.0.0.N: each publisher its own client address on loopback). */
  httpFrom?: string;
  policy?: 'all' | 'relay';
  /** An abusive peer: no media of its own, only what `sendRaw` gives it (see the fixture). */
  raw?: boolean;
  /** Video codec offered. Default H264. */
  codec?: 'H264' | 'VP8';
  /** A microphone: a packet file from `opusTone()`, sent a 20 ms packet at a time. Default: Opus silence with each video frame. */
  audio?: string;
}

export interface Published {
  id: string;
  status: number;
  location: string | null;
  /** The answer's Link header (ICE servers), as one string. */
  link: string | null;
  /** The error body when status is not 201. */
  body: string;
}

export interface PublisherStats {
  state: string;
  iceState: string;
  framesSent: number;
  /** Frames never sent because their tick came late (the process was held up): gaps in capture time. */
  framesSkipped: number;
  bytesSent: number;
  /** Viewers only: RTP packets and payload bytes received. */
  packetsReceived?: number;
  bytesReceived?: number;
  selected: { local: { address: string; port: number; type: string }; remote: { address: string; port: number; type: string } } | null;
}

type Event = { event: string; id: string } & Record<string, unknown>;

const CHILD = fileURLToPath(new URL('./fixtures/obsPublisherChild.ts', import.meta.url));

export class ObsPublishers {
  readonly #child;
  readonly #waiters = new Set<{ pred: (e: Event) => boolean; resolve: (e: Event) => void }>();
  readonly #states = new Map<string, string>();
  readonly #exited: Promise<void>;
  #seq = 0;

  constructor(netns?: string) {
    const node = [process.execPath, '--import', 'tsx', CHILD];
    const [cmd, ...args] = netns ? ['ip', 'netns', 'exec', netns, ...node] : node;
    this.#child = spawn(cmd as string, args, { stdio: ['pipe', 'pipe', 'inherit'] });
    this.#exited = new Promise((resolve) => this.#child.once('exit', () => resolve()));
    createInterface({ input: this.#child.stdout }).on('line', (line) => {
      let e: Event;
      try {
        e = JSON.parse(line) as Event;
      } catch {
        return;
      }
      if (e.event === 'state') this.#states.set(e.id, String(e['state']));
      for (const w of [...this.#waiters]) {
        if (w.pred(e)) {
          this.#waiters.delete(w);
          w.resolve(e);
        }
      }
    });
  }

  #send(cmd: Record<string, unknown>): void {
    this.#child.stdin.write(`${JSON.stringify(cmd)}\n`);
  }

  #next(pred: (e: Event) => boolean, timeoutMs: number, what: string): Promise<Event> {
    return new Promise((resolve, reject) => {
      const w = { pred, resolve: (e: Event) => (clearTimeout(timer), resolve(e)) };
      const timer = setTimeout(() => {
        this.#waiters.delete(w);
        reject(new Error(`obs publisher: no ${what} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiters.add(w);
    });
  }

  async publish(opts: PublishOptions): Promise<Published> {
    const id = `obs${++this.#seq}`;
    const answer = this.#next((e) => e.event === 'published' && e.id === id, 30_000, `answer for ${id}`);
    this.#send({ cmd: 'publish', id, fps: 30, ...opts });
    const e = await answer;
    return { id, status: Number(e['status']), location: (e['location'] as string | null) ?? null, link: (e['link'] as string | null) ?? null, body: String(e['body'] ?? '') };
  }

  /** A receive-only WHEP viewer (libdatachannel, H.264 + Opus, no decoding): for fan-out costs. */
  async play(opts: { url: string; httpFrom?: string }): Promise<Published> {
    const id = `view${++this.#seq}`;
    const answer = this.#next((e) => e.event === 'published' && e.id === id, 30_000, `answer for ${id}`);
    this.#send({ cmd: 'play', id, ...opts });
    const e = await answer;
    return { id, status: Number(e['status']), location: (e['location'] as string | null) ?? null, link: (e['link'] as string | null) ?? null, body: String(e['body'] ?? '') };
  }

  /** The latest peer-connection state seen (`new`, `connecting`, `connected`, `disconnected`, `failed`, `closed`). */
  state(id: string): string {
    return this.#states.get(id) ?? 'new';
  }

  /** Resolves when the publisher reaches `state`; rejects after timeoutMs. */
  async waitState(id: string, state: string, timeoutMs: number): Promise<void> {
    if (this.state(id) === state) return;
    await this.#next((e) => e.event === 'state' && e.id === id && e['state'] === state, timeoutMs, `state ${state} for ${id}`);
  }

  async stats(id: string): Promise<PublisherStats> {
    const reply = this.#next((e) => e.event === 'stats' && e.id === id, 5_000, `stats for ${id}`);
    this.#send({ cmd: 'stats', id });
    return (await reply) as unknown as PublisherStats;
  }

  /** Counter → epoch ms of its latest send (for glass-to-glass latency). */
  async sentTimes(id: string): Promise<Map<number, number>> {
    const reply = this.#next((e) => e.event === 'sent' && e.id === id, 5_000, `sent times for ${id}`);
    this.#send({ cmd: 'sent', id });
    return new Map((await reply)['times'] as [number, number][]);
  }

  /** A `raw` publisher sends these packets as they are; resolves with how many were sent and its video SSRC. */
  async sendRaw(id: string, packets: Buffer[]): Promise<{ accepted: number; ssrc: number }> {
    const reply = this.#next((e) => e.event === 'rawSent' && e.id === id, 10_000, `raw packets from ${id}`);
    this.#send({ cmd: 'raw', id, packets: packets.map((p) => p.toString('base64')) });
    const e = await reply;
    return { accepted: Number(e['accepted']), ssrc: Number(e['ssrc']) };
  }

  pause(id: string): void {
    this.#send({ cmd: 'pause', id });
  }

  resume(id: string): void {
    this.#send({ cmd: 'resume', id });
  }

  /** DELETE the session (as OBS does on stop) and close. */
  async stop(id: string): Promise<void> {
    const closed = this.#next((e) => e.event === 'closed' && e.id === id, 10_000, `close of ${id}`);
    this.#send({ cmd: 'delete', id });
    await closed;
  }

  /** Close without DELETE: the publisher vanishes. */
  async vanish(id: string): Promise<void> {
    const closed = this.#next((e) => e.event === 'closed' && e.id === id, 10_000, `close of ${id}`);
    this.#send({ cmd: 'close', id });
    await closed;
  }

  /** Ends every publisher and the child process. */
  async close(): Promise<void> {
    this.#child.stdin.end();
    const killer = setTimeout(() => this.#child.kill('SIGKILL'), 5_000);
    await this.#exited;
    clearTimeout(killer);
  }
}

export function startObsPublishers(t: Teardown, opts: { netns?: string } = {}): ObsPublishers {
  const pubs = new ObsPublishers(opts.netns);
  t.teardown(() => pubs.close());
  return pubs;
}

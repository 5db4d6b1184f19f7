/**
 * LL-HLS players as plain HTTP clients, in a child process of their own so that their load (200
 * players make ≈ 2,000 requests a second) does not share an event loop with the media node under
 * test. Each does what an LL-HLS player does at the live edge (rfc8216bis §6.2.5.2, §6.2.6): a
 * blocking playlist reload for the part the preload hint names, that hinted part at the same
 * time, and any listed part it has not fetched yet; it starts at the newest part listed.
 *
 * Run as a script: `node --import tsx llhlsPlayers.ts <playlist base URL> <players> <ms>` prints
 * one JSON array of PlayerResult on stdout.
 */
import { spawn } from 'node:child_process';
import { Agent, get } from 'node:http';
import { fileURLToPath } from 'node:url';

export interface PlayerResult {
  /** Distinct parts this player received (200, an fMP4 fragment). */
  parts: string[];
  /** When each of `parts` arrived, ms since the epoch (performance.timeOrigin + now: comparable across processes). */
  at: number[];
  /** Statuses other than 200 and errors, numbers masked (`404 partN.N.mNs`). */
  failures: string[];
}

/** The part the preload hint names: `part{M}.{P}.m4s` → [M, P]. */
function hinted(playlist: string): [number, number] | undefined {
  const m = /#EXT-X-PRELOAD-HINT:TYPE=PART,URI="part(\d+)\.(\d+)\.m4s/.exec(playlist);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/** One player at the live edge of `base` (…/hls/{playbackId}) until `endAt` (performance.now() ms). */
async function player(base: string, endAt: number): Promise<PlayerResult> {
  const parts = new Map<string, number>();
  const failures: string[] = [];
  // Its own connections, at most 6 (a browser's per host), kept alive between requests.
  const agent = new Agent({ keepAlive: true, maxSockets: 6 });
  // `hint`: the part a preload hint named, which may never come (the segment ended before it): 404 then.
  const get = async (path: string, hint = false): Promise<{ status: number; body: Buffer }> => {
    try {
      const res = await request(`${base}/${path}`, agent);
      if (res.status !== 200 && !(hint && res.status === 404)) failures.push(`${res.status} ${path}${hint ? " hint" : ""}`);
      return res;
    } catch (err) {
      failures.push(`${(err as Error & { code?: string }).code ?? (err as Error).message} ${path.replace(/\d+/g, 'N')}`);
      return { status: 0, body: Buffer.alloc(0) };
    }
  };
  // Parts asked for once: a part that failed is not asked again (a player moves on, as hls.js does).
  const tried = new Set<string>();
  const part = async (uri: string, hint = false) => {
    if (parts.has(uri) || (tried.has(uri) && !hint)) return;
    tried.add(uri);
    const r = await get(uri, hint);
    // A part is an fMP4 fragment: moof first.
    if (r.status === 200 && r.body.subarray(4, 8).toString('latin1') === 'moof') parts.set(uri, performance.timeOrigin + performance.now());
  };
  let pl = await get('index.m3u8');
  while (performance.now() < endAt && pl.status === 200) {
    const text = pl.body.toString('utf8');
    const listed = [...text.matchAll(/#EXT-X-PART:[^\n]*URI="(part\d+\.\d+\.m4s)"/g)].map((m) => m[1] ?? '');
    const fresh = parts.size === 0 ? listed.slice(-1) : listed.filter((u) => !tried.has(u));
    const next = hinted(text);
    if (!next) {
      failures.push('playlist without a preload hint');
      break;
    }
    const [msn, idx] = next;
    const [reload] = await Promise.all([get(`index.m3u8?_HLS_msn=${msn}&_HLS_part=${idx}`), part(`part${msn}.${idx}.m4s`, true), ...fresh.map((u) => part(u))]);
    pl = reload;
  }
  agent.destroy();
  return { parts: [...parts.keys()], at: [...parts.values()], failures };
}

/** GET `url` through `agent`: status and body. Bounded: a blocking reload is held 3 × target duration at most (6 s with the defaults). */
function request(url: string, agent: Agent): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = get(url, { agent, timeout: 10_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(Object.assign(new Error('timed out'), { code: 'TIMEOUT' })));
    req.on('error', reject);
  });
}

/** `n` players of `base` for `ms`, in a child process; killed on `t`'s teardown if still running. */
export async function runPlayers(t: { teardown(fn: () => unknown): void }, base: string, n: number, ms: number): Promise<PlayerResult[]> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), base, String(n), String(ms)], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`players exited ${code}`);
  return JSON.parse(out) as PlayerResult[];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [base = '', n = '0', ms = '0'] = process.argv.slice(2);
  const endAt = performance.now() + Number(ms);
  const results = await Promise.all(Array.from({ length: Number(n) }, () => player(base, endAt)));
  process.stdout.write(JSON.stringify(results));
}

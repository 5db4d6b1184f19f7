/**
 * An LL-HLS playlist's complete segments as a player reads them: each fetched once as it is
 * listed, with the init segment, and their audio decoded by ffmpeg (48 kHz stereo).
 */
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { until } from './until.ts';

const run = promisify(execFile);
const RATE = 48_000;

/** Segments of an LL-HLS playlist, fetched as they complete (each once), with the init segment. */
export class SegmentCollector {
  readonly #url: string;
  init: Buffer | null = null;
  readonly segments = new Map<number, Buffer>();
  constructor(url: string) {
    this.#url = url;
  }

  /** The media sequence numbers listed now (fetching the new ones). */
  async poll(): Promise<number[]> {
    const res = await fetch(this.#url);
    const text = await res.text();
    if (res.status !== 200) return [];
    const listed: number[] = [];
    for (const line of text.split('\n')) {
      const m = /^#EXT-X-MAP:URI="([^"]+)"/.exec(line);
      if (m && !this.init) this.init = Buffer.from(await (await fetch(new URL(m[1]!, this.#url))).arrayBuffer());
      const s = /^seg(\d+)\.m4s$/.exec(line);
      if (!s) continue;
      const msn = Number(s[1]);
      listed.push(msn);
      if (!this.segments.has(msn)) this.segments.set(msn, Buffer.from(await (await fetch(new URL(line, this.#url))).arrayBuffer()));
    }
    return listed;
  }

  /** Polls (at a player's pace) until `count` segments after `afterMsn` are held; returns their msns. */
  async collect(afterMsn: number, count: number, timeoutMs: number): Promise<number[]> {
    const want = Array.from({ length: count }, (_, i) => afterMsn + 1 + i);
    await until(`${count} segments after ${afterMsn}`, () => this.poll(), () => want.every((m) => this.segments.has(m)), timeoutMs, 300);
    return want;
  }

  /** The newest msn listed now (polling until one is). */
  async newest(timeoutMs: number): Promise<number> {
    const listed = await until('a segment listed', () => this.poll(), (l) => l.length > 0, timeoutMs, 300);
    return Math.max(...listed);
  }

  /** The segments' audio decoded by ffmpeg: interleaved 48 kHz stereo int16. */
  async decode(msns: number[], dir: string, name: string): Promise<Int16Array> {
    const file = join(dir, `${name}.mp4`);
    writeFileSync(file, Buffer.concat([this.init!, ...msns.map((m) => this.segments.get(m)!)]));
    const { stdout } = await run('ffmpeg', ['-v', 'error', '-i', file, '-map', '0:a', '-f', 's16le', '-ac', '2', '-ar', String(RATE), '-'], { encoding: 'buffer', maxBuffer: 64 << 20 });
    const out = new Int16Array(stdout.length >> 1);
    Buffer.from(out.buffer).set(stdout.subarray(0, out.length * 2));
    return out;
  }
}

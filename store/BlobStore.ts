import { randomBytes } from 'node:crypto';
import { createReadStream, type Dirent } from 'node:fs';
import type { Readable } from 'node:stream';
import { appendFile, mkdir, open, readdir, readFile, rename, rm, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { StoreError } from './errors.ts';

/**
 * Files (song WAV/MP3, style images) by key. Keys are `/`-separated relative paths whose
 * segments start with a letter or digit and hold only `[A-Za-z0-9._-]`: no `..`, no absolute
 * paths, no hidden files (temp files use a leading `.`, so they can never be read as a key).
 */
export interface BlobStore {
  /** Writes atomically: readers see the old file or the whole new one, never a part. */
  put(key: string, data: Buffer): Promise<void>;
  /**
   * Appends to a blob, creating it if missing: for files that grow while readers follow them
   * (a take's MP3 while it is encoded). Not atomic: readers may see any prefix.
   */
  append(key: string, data: Buffer): Promise<void>;
  /** The whole blob, or null if missing. */
  get(key: string): Promise<Buffer | null>;
  /** Size in bytes, or null if missing. */
  stat(key: string): Promise<{ size: number } | null>;
  /** Reads the blob, optionally a byte range (`end` inclusive, as HTTP Range). Errors with ENOENT if missing. */
  createReadStream(key: string, range?: { start: number; end?: number }): Readable;
  exists(key: string): Promise<boolean>;
  /** True if something was deleted. */
  delete(key: string): Promise<boolean>;
  /**
   * Deletes every blob whose key starts with `prefix` (`songs/sng_1/` or `songs/sng_1/take-`);
   * returns how many.
   */
  deletePrefix(prefix: string): Promise<number>;
  /** Names of the blobs directly under the folder `dir` (`clips/str_1`), sorted; [] if none. */
  list(dir: string): Promise<string[]>;
  /** Names of the folders directly under the folder `dir` (`slates`), sorted; [] if none. */
  folders(dir: string): Promise<string[]>;
  /** Local file path of the key (filesystem stores; for `sendFile`-style serving). */
  pathOf(key: string): string;
}

const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** Throws `invalid_argument` unless `key` is a safe relative key (see BlobStore). */
export function checkBlobKey(key: string): void {
  if (key.length === 0 || key.length > 512 || !key.split('/').every((s) => SEGMENT.test(s))) {
    throw new StoreError('invalid_argument', `invalid blob key [key:${key}]`);
  }
}

/** BlobStore on the local filesystem under `dir` (a shared mount works for scale-out). */
export class FsBlobStore implements BlobStore {
  readonly dir: string;

  constructor(dir: string) {
    this.dir = path.resolve(dir);
  }

  pathOf(key: string): string {
    checkBlobKey(key);
    return path.join(this.dir, ...key.split('/'));
  }

  async put(key: string, data: Buffer): Promise<void> {
    const file = this.pathOf(key);
    await mkdir(path.dirname(file), { recursive: true });
    const tmp = path.join(path.dirname(file), `.tmp-${randomBytes(6).toString('hex')}`);
    const handle = await open(tmp, 'w');
    try {
      await handle.writeFile(data);
      // On disk before the rename publishes it, so a crash never leaves a short file under the key.
      await handle.sync();
    } catch (err) {
      await handle.close();
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
    await handle.close();
    try {
      await rename(tmp, file);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
  }

  async append(key: string, data: Buffer): Promise<void> {
    const file = this.pathOf(key);
    await mkdir(path.dirname(file), { recursive: true });
    await appendFile(file, data);
  }

  async get(key: string): Promise<Buffer | null> {
    try {
      return await readFile(this.pathOf(key));
    } catch (err) {
      if (isMissing(err)) return null;
      throw err;
    }
  }

  async stat(key: string): Promise<{ size: number } | null> {
    try {
      const info = await stat(this.pathOf(key));
      return info.isFile() ? { size: info.size } : null;
    } catch (err) {
      if (isMissing(err)) return null;
      throw err;
    }
  }

  createReadStream(key: string, range?: { start: number; end?: number }): Readable {
    return createReadStream(this.pathOf(key), range);
  }

  async exists(key: string): Promise<boolean> {
    return (await this.stat(key)) !== null;
  }

  async delete(key: string): Promise<boolean> {
    try {
      await unlink(this.pathOf(key));
      return true;
    } catch (err) {
      if (isMissing(err)) return false;
      throw err;
    }
  }

  async list(dir: string): Promise<string[]> {
    return this.#entries(dir, (e) => e.isFile());
  }

  async folders(dir: string): Promise<string[]> {
    return this.#entries(dir, (e) => e.isDirectory());
  }

  async #entries(dir: string, keep: (e: Dirent) => boolean): Promise<string[]> {
    checkBlobKey(dir);
    try {
      const entries = await readdir(path.join(this.dir, ...dir.split('/')), { withFileTypes: true });
      return entries.filter((e) => keep(e) && !e.name.startsWith('.')).map((e) => e.name).sort();
    } catch (err) {
      if (isMissing(err)) return [];
      throw err;
    }
  }

  async deletePrefix(prefix: string): Promise<number> {
    // A prefix is a key, possibly ending in `/` or cut mid-segment.
    const dirPart = prefix.includes('/') ? prefix.slice(0, prefix.lastIndexOf('/')) : '';
    const namePart = prefix.slice(prefix.lastIndexOf('/') + 1);
    if (dirPart !== '') checkBlobKey(dirPart);
    if (namePart !== '' && !/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(namePart)) {
      throw new StoreError('invalid_argument', `invalid blob prefix [prefix:${prefix}]`);
    }
    if (prefix === '') throw new StoreError('invalid_argument', 'refusing to delete every blob (empty prefix)');
    const base = dirPart === '' ? this.dir : path.join(this.dir, ...dirPart.split('/'));
    let entries;
    try {
      entries = await readdir(base, { withFileTypes: true });
    } catch (err) {
      if (isMissing(err)) return 0;
      throw err;
    }
    let count = 0;
    for (const entry of entries) {
      if (entry.name.startsWith('.') || !entry.name.startsWith(namePart)) continue;
      const full = path.join(base, entry.name);
      count += entry.isDirectory() ? await countFiles(full) : 1;
      await rm(full, { recursive: true, force: true });
    }
    return count;
  }
}

async function countFiles(dir: string): Promise<number> {
  let n = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) n += await countFiles(path.join(dir, entry.name));
    else if (!entry.name.startsWith('.')) n++;
  }
  return n;
}

function isMissing(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

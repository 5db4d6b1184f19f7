import { StoreError } from './errors.ts';
import type { NodeEntry, NodeRegistry } from './Store.ts';

const NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

/** Kinds and ids become part of Redis keys and fields: keep them to a safe alphabet. */
export function checkNodeName(what: 'kind' | 'id', value: string): void {
  if (!NAME.test(value)) throw new StoreError('invalid_argument', `node ${what} must match ${NAME.source} [${what}:${value}]`);
}

export function checkTtl(ttlMs: number): void {
  if (!Number.isFinite(ttlMs) || ttlMs <= 0) throw new StoreError('invalid_argument', `node ttlMs must be > 0 [ttlMs:${ttlMs}]`);
}

/**
 * The embedded store's registry: in memory. Presence only matters while the process that beats
 * is running, and the embedded store has one process, so nothing needs to reach disk.
 * Entries are copied through JSON like the Redis registry does, so callers never share objects.
 */
export class MemoryNodeRegistry implements NodeRegistry {
  readonly #kinds = new Map<string, Map<string, string>>();

  constructor(
    private readonly now: () => number,
    private readonly assertOpen: () => void,
  ) {}

  async beat(kind: string, id: string, info: unknown, ttlMs: number): Promise<void> {
    this.assertOpen();
    checkNodeName('kind', kind);
    checkNodeName('id', id);
    checkTtl(ttlMs);
    const now = this.now();
    let entries = this.#kinds.get(kind);
    if (!entries) {
      entries = new Map();
      this.#kinds.set(kind, entries);
    }
    entries.set(id, JSON.stringify({ id, info: info ?? null, lastBeatMs: now, expiresAtMs: now + Math.round(ttlMs) } satisfies NodeEntry));
  }

  async list(kind: string): Promise<NodeEntry[]> {
    this.assertOpen();
    checkNodeName('kind', kind);
    const entries = [...(this.#kinds.get(kind)?.entries() ?? [])].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return entries.map(([, json]) => JSON.parse(json) as NodeEntry);
  }

  async remove(kind: string, id: string): Promise<boolean> {
    this.assertOpen();
    checkNodeName('kind', kind);
    checkNodeName('id', id);
    return this.#kinds.get(kind)?.delete(id) ?? false;
  }
}

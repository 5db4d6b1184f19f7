/**
 * Ids of stored records: a type prefix (`str`, `clp`, …) and 16 random bytes as base64url
 * (22 characters), so ids are collision-free at any scale we will see and say what they name.
 *
 * High-volume records (webhook events and deliveries: thousands a second) take time-ordered ids
 * instead: a random id lands on a random leaf of every B-tree index that holds it (SQLite's
 * primary-key and unique indexes), so each insert dirties pages of its own and every commit
 * writes them all; ids that sort by creation time go to the right edge of the index, where one
 * page takes the inserts of a whole batch.
 */
import { randomBytes, randomFillSync } from 'node:crypto';

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(16).toString('base64url')}`;
}

/** Random bytes drawn in blocks: one `randomFillSync` per 4 KiB rather than one per id. */
const pool = Buffer.alloc(4096);
let poolAt = pool.length;

function randomHex(bytes: number): string {
  if (poolAt + bytes > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  poolAt += bytes;
  return pool.toString('hex', poolAt - bytes, poolAt);
}

/**
 * `<prefix>_` + 24 lowercase hex characters: the creation time in ms since the epoch (12 hex
 * digits, 48 bits, good until the year 10889), then 48 random bits (1 in 2^48 that two ids made
 * in the same millisecond collide). Ids of one store sort by creation time to the millisecond.
 */
export function newTimeOrderedId(prefix: string, nowMs: number = Date.now()): string {
  return `${prefix}_${Math.floor(nowMs).toString(16).padStart(12, '0')}${randomHex(6)}`;
}

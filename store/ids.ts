/**
 * Ids of stored records: a type prefix (`str`, `clp`, …) and 16 random bytes as base64url
 * (22 characters), so ids are collision-free at any scale we will see and say what they name.
 */
import { randomBytes } from 'node:crypto';

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(16).toString('base64url')}`;
}

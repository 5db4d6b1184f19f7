/**
 * store/: the storage contract (Store.ts), its record shapes (records.ts), the embedded (SQLite)
 * and Redis implementations, and the blob store. Everything else in the folder is internal.
 */
export type * from './Store.ts';
export type * from './records.ts';
export { PLANS } from './records.ts';
export { DELIVERY_QUEUE } from './Store.ts';
export { StoreError, isStoreUnavailable, type StoreErrorCode } from './errors.ts';
export { createStore, type CreateStoreOptions } from './createStore.ts';
export { EmbeddedStore, type EmbeddedStoreOptions } from './EmbeddedStore.ts';
export { RedisStore, type RedisStoreOptions } from './RedisStore.ts';
export { FsBlobStore, checkBlobKey, type BlobStore } from './BlobStore.ts';
export { JobLoop, type JobLoopOptions } from './JobLoop.ts';
export { newId, newTimeOrderedId } from './ids.ts';

/** The queue consumer lives in store/ (songs use it too); re-exported for this folder's imports. */
export { JobLoop, type JobLoopOptions } from '../store/index.ts';

/**
 * Area A services for app tests: the real SongService with the engine's planner. No render
 * worker runs unless a test starts one, so songs stay queued and positions are predictable.
 */
import { enginePlanner } from '../../control/SongRoles.ts';
import pino from 'pino';
import { RenderPool, SongRenderWorker } from '../../songs/index.ts';
import { SongService } from '../../songs/SongService.ts';
import type { BlobStore, Store } from '../../store/index.ts';

export function songServices({ store }: { store: Store }, opts: { canRender?: () => Promise<boolean>; now?: () => number } = {}) {
  return {
    songs: new SongService({ store, planner: enginePlanner, canRender: opts.canRender ?? (async () => true), ...(opts.now ? { now: opts.now } : {}) }),
  };
}

/** A render worker on one real render thread (the engine as production runs it), started now and closed at teardown. */
export function startRenderWorker(t: { teardown(fn: () => unknown): void }, deps: { store: Store; blobs: BlobStore; now?: () => number }): SongRenderWorker {
  const pool = new RenderPool({ size: 1 });
  const worker = new SongRenderWorker({ store: deps.store, blobs: deps.blobs, render: (plan, n, p, o) => pool.render(plan as never, n, p, o), logger: pino({ level: 'silent' }), ...(deps.now ? { now: deps.now } : {}) });
  t.teardown(async () => {
    await worker.close();
    await pool.close();
  });
  worker.start();
  return worker;
}

/**
 * Area A services for app tests: the real SongService with the engine's planner. No render
 * worker runs unless a test starts one, so songs stay queued and positions are predictable.
 */
import { enginePlanner } from '../../control/SongRoles.ts';
import { SongService } from '../../songs/SongService.ts';
import type { Store } from '../../store/index.ts';

export function songServices({ store }: { store: Store }, opts: { canRender?: () => Promise<boolean>; now?: () => number } = {}) {
  return {
    songs: new SongService({ store, planner: enginePlanner, canRender: opts.canRender ?? (async () => true), ...(opts.now ? { now: opts.now } : {}) }),
  };
}

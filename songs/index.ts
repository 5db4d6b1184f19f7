/**
 * Public API of the music engine.
 * - planSong(): prompt and settings → SongPlan (throws ArtistRefusedError → HTTP 422).
 * - parseKey(): validator for the `key` field (24 keys, enharmonic spellings) → `F# minor` or null.
 * - renderTake(): one take (WAV, MP3, MIDI, optional stems zip, 200 peaks, duration) on a shared worker pool;
 *   closeRenderPool() stops it. Or own a `new RenderPool({ size })` and call `pool.render()`.
 */
import { RenderPool } from './RenderPool.ts';
import type { RenderOptions, TakeResult } from './Renderer.ts';
import type { SongPlan } from './SongPlanner.ts';

export { ArtistRefusedError, type ArtistMatch } from './ArtistFilter.ts';
export { GENRES, type Genre, type GenreId } from './Genres.ts';
export { ALL_KEYS, parseKey } from './Keys.ts';
export { Mp3EncodeError } from './Mp3Encoder.ts';
export { PoolClosedError, RenderError, RenderPool, type RenderPoolOptions } from './RenderPool.ts';
export type { RenderOptions, TakeResult } from './Renderer.ts';
export { STEM_NAMES, type StemName } from './Mixer.ts';
export { MAX_DURATION, MIN_DURATION, planSong, type PlanInput, type SongPlan } from './SongPlanner.ts';
export type { AskedSection, Section, SectionKind } from './Arranger.ts';
export { PlanInputError } from './PlanInputError.ts';

let shared: RenderPool | null = null;

/** Renders take n (1 or 2) of a plan off the main thread (shared pool of 2 workers). */
export function renderTake(plan: SongPlan, n: 1 | 2, onProgress?: (fraction: number) => void, options?: RenderOptions): Promise<TakeResult> {
  shared ??= new RenderPool({ size: 2 });
  return shared.render(plan, n, onProgress, options);
}

/** Closes the shared pool (idempotent); a later renderTake() starts a new one. */
export async function closeRenderPool(): Promise<void> {
  const p = shared;
  shared = null;
  if (p) await p.close();
}

// The song service (api role) and render worker (worker role) around the engine.
export { SongService, RENDER_QUEUE, type Planner, type ResolvedPlan, type SongRequest, type SongCreateOutcome, type Usage } from './SongService.ts';
export { SongRenderWorker, partialMp3Key, type TakeRenderer, type RenderedTake, type SongRenderWorkerOptions } from './SongRenderWorker.ts';
export { MONTHLY_SONGS, MAX_ACTIVE_SONGS, usageMonth, resetsAt } from './Plans.ts';

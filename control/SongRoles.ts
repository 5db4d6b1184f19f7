/**
 * Songs in each role: the api role plans and queues (SongService), the worker role renders
 * (SongRenderWorker on a pool of render threads). "Can render" is true when this process renders;
 * in scale-out (Redis) the api role trusts that workers exist and answers 503 only while the
 * render backlog is too long for a song to start soon.
 */
import type { Config } from './config.ts';
import type { RoleDeps } from './RoleDeps.ts';
import type { Services } from './Services.ts';
import { planSong, RenderPool, SongRenderWorker, SongService, RENDER_QUEUE, type Planner } from '../songs/index.ts';

/** Render jobs waiting beyond which new songs are refused with 503 (≈ minutes of work on one worker). */
export const MAX_RENDER_BACKLOG = 50;

export const enginePlanner: Planner = (req) => {
  const plan = planSong({
    prompt: req.prompt,
    loop: req.loop,
    seed: req.seed,
    ...(req.duration !== undefined ? { duration: req.duration } : {}),
    ...(req.bpm !== undefined ? { bpm: req.bpm } : {}),
    ...(req.key !== undefined ? { key: req.key } : {}),
    ...(req.sections !== undefined ? { sections: req.sections.map((s) => ({ name: s.name, bars: s.bars, energy: s.energy, style: s.style })) } : {}),
  });
  return {
    bpm: plan.bpm,
    key: plan.keyRequested,
    duration: plan.durationRequested,
    sections: plan.sections.map((s) => ({ name: s.kind, start_bar: s.startBar, bars: s.bars, energy: s.energy, style: s.style })),
    plan,
  };
};

export async function startSongRoles(config: Readonly<Config>, deps: RoleDeps): Promise<{ services: Services; close(): Promise<void> }> {
  const services: Services = {};
  let pool: RenderPool | null = null;
  let worker: SongRenderWorker | null = null;
  const rendersHere = config.roles.includes('worker') && config.renderWorkers > 0;

  if (rendersHere) {
    const renders = deps.metrics.counter('reverie_song_renders_total', 'Song render attempts in this process, by how they ended (done, retried, failed).', ['outcome']);
    // 0.5 s … 10 min: a 10 s song renders in about a second, two takes of a long one in minutes.
    const renderSeconds = deps.metrics.histogram('reverie_song_render_duration_seconds', 'Wall time of a song render attempt (all takes), seconds.', ['outcome'], [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600]);
    pool = new RenderPool({ size: config.renderWorkers, prewarm: true });
    worker = new SongRenderWorker({
      store: deps.store,
      blobs: deps.blobs,
      logger: deps.logger,
      render: (plan, n, onProgress, options) => pool!.render(plan as Parameters<RenderPool['render']>[0], n, onProgress, options),
      concurrency: config.renderWorkers,
      onRender: (outcome, seconds) => {
        renders.inc({ outcome });
        renderSeconds.observe({ outcome }, seconds);
      },
      ...(deps.now ? { now: deps.now } : {}),
    });
    worker.start();
  }

  if (config.roles.includes('api')) {
    const remoteWorkers = deps.store.kind === 'redis';
    services.songs = new SongService({
      store: deps.store,
      planner: enginePlanner,
      canRender: async () => {
        if (!rendersHere && !remoteWorkers) return false;
        const { ready } = await deps.store.queue.stats(RENDER_QUEUE);
        return ready < MAX_RENDER_BACKLOG;
      },
      ...(deps.now ? { now: deps.now } : {}),
    });
  }

  return {
    services,
    async close() {
      await worker?.close();
      await pool?.close();
    },
  };
}

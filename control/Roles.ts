/**
 * Starts what each role of this process runs (design.md "One codebase, three roles"):
 * - api: the services behind the REST routes;
 * - worker: song renders, webhook deliveries, lifecycle timers (queue consumers);
 * - media: the WebRTC/GStreamer live path and its WHIP/WHEP routes.
 * The same objects run in every mode: only the store behind them differs (embedded or Redis).
 */
import { readFileSync } from 'node:fs';
import type { Store } from '../store/index.ts';
import type { FetchImage } from '../media/index.ts';
import { createWebhooks, DELIVER_QUEUE, EVENTS_QUEUE } from '../webhooks/index.ts';
import { SafeHttpClient } from '../outbound/index.ts';
import { RENDER_QUEUE } from '../songs/index.ts';
import type { Config } from './config.ts';
import type { Metrics } from './Metrics.ts';
import type { Services } from './Services.ts';
import { startSongRoles } from './SongRoles.ts';
import { startStreamRoles } from './StreamRoles.ts';

export type { RoleDeps } from './RoleDeps.ts';
import type { RoleDeps } from './RoleDeps.ts';

export interface RoleHandles {
  services: Services;
  /** Stops consumers and nodes; idempotent. */
  close(): Promise<void>;
}

export async function startRoles(config: Readonly<Config>, deps: RoleDeps): Promise<RoleHandles> {
  const closers: (() => Promise<void>)[] = [];
  const services: Services = {};
  registerQueueMetrics(deps.metrics, deps.store);
  const has = (role: Config['roles'][number]) => config.roles.includes(role);

  const webhooks = createWebhooks({
    store: deps.store,
    logger: deps.logger,
    allowLoopback: config.allowLoopbackTargets,
    ...(config.extraCaFile ? { ca: readFileSync(config.extraCaFile) } : {}),
    ...(deps.now ? { now: deps.now } : {}),
    service: { resendsPerMinute: config.webhooks.resendsPerMinute, recoversPerMinute: config.webhooks.recoversPerMinute, maxPerRecover: config.webhooks.maxPerRecover },
    engine: {
      leaseBatch: config.webhookLeaseBatch,
      orderRecheckMs: config.webhookOrderRecheckMs,
      attemptsKept: config.webhooks.attemptsKept,
      operationalEventsPerHour: config.webhooks.operationalEventsPerHour,
    },
  });
  closers.push(() => webhooks.close());
  if (has('api')) services.webhooks = webhooks.service;
  if (has('worker')) await webhooks.engine.start();

  const songs = await startSongRoles(config, deps);
  closers.push(() => songs.close());
  Object.assign(services, songs.services);

  // Style images for IP-Adapter come through the same SSRF-safe client as webhooks (issue 6).
  const fetchImage: FetchImage = async (url, { maxBytes, timeoutMs }) => {
    const res = await webhooks.client.request(url, { timeoutMs, maxResponseBytes: maxBytes + 1 });
    if (res.status !== 200) throw new Error(`style image ${url}: HTTP ${res.status}`);
    if (res.truncated || res.body.length > maxBytes) throw new Error(`style image ${url}: larger than ${maxBytes} bytes`);
    return res.body;
  };
  // Admission hooks and JWKS fetches: the webhooks' address policy and CA, in a pool of their own
  // (a slow webhook receiver must not hold the sockets a viewer's admission waits for).
  const admissionClient = new SafeHttpClient({ policy: webhooks.policy, ...(config.extraCaFile ? { ca: readFileSync(config.extraCaFile) } : {}), userAgent: 'Reverie-Admission/1.0' });
  closers.push(async () => admissionClient.close());
  const streams = await startStreamRoles(config, deps, { fetchImage, admissionClient, ...(deps.mediaSettings ? { mediaSettings: deps.mediaSettings } : {}) });
  closers.push(() => streams.close());
  Object.assign(services, streams.services);

  let closing: Promise<void> | null = null;
  return {
    services,
    close() {
      closing ??= (async () => {
        // Last started, first stopped; every closer runs even if one throws.
        const errors: unknown[] = [];
        for (const close of closers.reverse()) await close().catch((err: unknown) => errors.push(err));
        if (errors.length) throw new AggregateError(errors, 'roles failed to close cleanly');
      })();
      return closing;
    },
  };
}

/**
 * `reverie_queue_jobs{queue,state}`: jobs in the store's queues (song renders, webhook events
 * and deliveries), read at scrape. In scale-out every process reports the same shared queues:
 * aggregate with `max by (queue, state)`, not `sum`.
 */
export function registerQueueMetrics(metrics: Metrics, store: Store): void {
  metrics.gauge('reverie_queue_jobs', 'Jobs in a store queue by state: ready (waiting for a worker), delayed (retry or timer not yet due), leased (being worked on).', ['queue', 'state'], async (g) => {
    // A store outage must not fail or stall the whole scrape (Redis holds commands while it
    // reconnects, ≈ 10 s): a queue whose stats do not come within 1 s is left out of this scrape.
    const within = async (stats: () => Promise<{ ready: number; delayed: number; leased: number }>) => {
      let timer: NodeJS.Timeout | undefined;
      try {
        return await Promise.race([stats(), new Promise<null>((resolve) => (timer = setTimeout(resolve, 1000, null)))]);
      } catch {
        return null;
      } finally {
        clearTimeout(timer);
      }
    };
    const queues = [RENDER_QUEUE, EVENTS_QUEUE, DELIVER_QUEUE];
    // The deliveries queue is the deliveries table itself, counted by its own repository call.
    const all = await Promise.all(queues.map((q) => within(q === DELIVER_QUEUE ? () => store.webhooks.deliveryQueueStats() : () => store.queue.stats(q))));
    g.reset();
    queues.forEach((queue, i) => {
      const stats = all[i];
      if (!stats) return;
      for (const state of ['ready', 'delayed', 'leased'] as const) g.set({ queue, state }, stats[state]);
    });
  });
}

/**
 * Live streams in each role (design.md "One codebase, three roles"):
 * - media: the MediaNode (WHIP/WHEP routes, the live path) behind a LocalMediaNodeClient;
 * - api: StreamService, which reaches media nodes only through the MediaNodeClient;
 * - worker: StreamLifecycle (node events → state changes and webhook events; timeout and allowance
 *   sweeps). In the embedded default all three share one process and one local node.
 *
 * Without a media node in this process the api role gets a client with no nodes (creates answer
 * 503 STREAMS/NO_CAPACITY) until the Redis-backed client exists.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { MediaNode, type FrameProcessorFactory, type MediaSettings } from '../media/index.ts';
import type { Config } from './config.ts';
import { LocalMediaNodeClient } from './LocalMediaNodeClient.ts';
import type { MediaNodeClient } from './MediaNodeClient.ts';
import type { RoleDeps } from './Roles.ts';
import type { Services } from './Services.ts';
import { StreamLifecycle, type LifecycleClock, type StreamLifecycleOptions } from './StreamLifecycle.ts';
import { MODEL_IDS } from './StreamParams.ts';
import { StreamService } from './StreamService.ts';

export interface StreamRoleOverrides {
  /** The supervisor's clock (tests move it instead of waiting 45 s). */
  lifecycleClock?: LifecycleClock;
  lifecycle?: Partial<Pick<StreamLifecycleOptions, 'timeoutMs' | 'sweepIntervalMs' | 'allowances'>>;
  mediaSettings?: Partial<MediaSettings>;
  createProcessor?: FrameProcessorFactory;
  /** Host candidates to advertise (default: every interface). */
  iceAddresses?: string[];
  /** Streams the local node holds at most. */
  capacity?: number;
}

export interface StreamRoles {
  services: Services;
  node: MediaNode | null;
  media: MediaNodeClient;
  lifecycle: StreamLifecycle | null;
  close(): Promise<void>;
}

/**
 * Which of the four models the local node has: the ones with a folder under MODELS_DIR. With none
 * (no real or tiny exports yet) every model is served by demo stand-ins, and the status says so.
 */
export function localModels(modelsDir: string): { models: string[]; demo: boolean } {
  const present = MODEL_IDS.filter((id) => existsSync(join(modelsDir, id, 'unet')));
  // The media node does not run diffusion yet (its default processor applies image chains only),
  // so even models on disk are demo until the diffusion stage is wired in.
  return present.length > 0 ? { models: present, demo: true } : { models: [...MODEL_IDS], demo: true };
}

/** A client for a process without a media node: no nodes, nothing to reach. */
class NoMediaNodes implements MediaNodeClient {
  async nodes() {
    return [];
  }
  async updateParams() {
    return { delivered: false, restartCount: 0 };
  }
  async status() {
    return null;
  }
  async endStream() {
    return false;
  }
  async subscribe() {
    return async () => undefined;
  }
  async close() {}
}

export async function startStreamRoles(config: Readonly<Config>, deps: RoleDeps & { logger: Logger }, overrides: StreamRoleOverrides = {}): Promise<StreamRoles> {
  const services: Services = {};
  const has = (role: Config['roles'][number]) => config.roles.includes(role);
  let node: MediaNode | null = null;
  let media: MediaNodeClient = new NoMediaNodes();
  let service: StreamService | null = null;

  if (has('media')) {
    node = new MediaNode({
      publicUrl: config.publicUrl,
      logger: deps.logger,
      ...(overrides.iceAddresses ? { iceAddresses: overrides.iceAddresses } : {}),
      ...(overrides.mediaSettings ? { settings: overrides.mediaSettings } : {}),
      ...(overrides.createProcessor ? { createProcessor: overrides.createProcessor } : {}),
      // The service exists below whenever the api role runs here; a media-only process without a
      // store-backed resolver refuses every publisher.
      resolveIngest: (streamId, bearer) => service?.resolveIngest(streamId, bearer) ?? Promise.resolve(null),
      resolvePlayback: (playbackId) => service?.resolvePlayback(playbackId) ?? Promise.resolve(null),
    });
    const { models, demo } = localModels(config.modelsDir);
    if (demo) deps.logger.warn(`startStreamRoles() | media node serves demo stand-ins for ${models.join(', ')} (no diffusion stage wired)`);
    media = new LocalMediaNodeClient({
      node,
      models,
      demo,
      logger: deps.logger,
      ...(overrides.capacity !== undefined ? { capacity: overrides.capacity } : {}),
      ...(deps.now ? { now: deps.now } : {}),
    });
    const n = node;
    services.mediaRoutes = async (app) => {
      n.registerRoutes(app);
    };
  }

  // The resolvers above need the service even when this process does not serve the REST API.
  if (has('api') || has('media')) {
    service = new StreamService({ store: deps.store, media, publicUrl: config.publicUrl, logger: deps.logger, ...(deps.now ? { now: deps.now } : {}) });
    if (has('api')) services.streams = service;
  }

  let lifecycle: StreamLifecycle | null = null;
  if (has('worker') || has('media')) {
    lifecycle = new StreamLifecycle({
      store: deps.store,
      media,
      logger: deps.logger,
      ...overrides.lifecycle,
      ...(overrides.lifecycleClock ? { clock: overrides.lifecycleClock } : deps.now ? { clock: { now: deps.now, setInterval, clearInterval: (h) => clearInterval(h as NodeJS.Timeout) } } : {}),
    });
    await lifecycle.start();
  }

  let closing: Promise<void> | null = null;
  return {
    services,
    node,
    media,
    lifecycle,
    close() {
      closing ??= (async () => {
        // Streams before the supervisor, so the last `ended` events are recorded.
        const steps = [() => node?.close(), () => lifecycle?.close(), () => media.close()];
        for (const step of steps) {
          try {
            await step();
          } catch (err) {
            deps.logger.warn({ err }, 'close() | stream roles step failed');
          }
        }
      })();
      return closing;
    },
  };
}

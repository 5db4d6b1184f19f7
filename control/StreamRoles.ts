/**
 * Live streams in each role (design.md "One codebase, three roles"):
 * - media: the MediaNode (WHIP/WHEP routes, the live path) behind a InProcessMediaNodeClient;
 * - api: StreamService, which reaches media nodes only through the MediaNodeClient;
 * - worker: StreamLifecycle (node events → state changes and webhook events; timeout and allowance
 *   sweeps). In the embedded default all three share one process and one local node.
 *
 * Without a media node in this process the api role gets a client with no nodes (creates answer
 * 503 STREAMS/NO_CAPACITY) until the Redis-backed client exists.
 */
import type { Logger } from 'pino';
import { ImageDecoder } from '../images/index.ts';
import { MediaNode, registerMediaRoutes, defaultProcessorFactory, diffusionProcessorFactory, prepareModels, type FetchImage, type FrameProcessorFactory, type MediaSettings } from '../media/index.ts';
import { AddressPolicy, type SafeHttpClient } from '../outbound/index.ts';
import {
  AdmissionGate,
  AdmissionService,
  ClipService,
  InProcessMediaNodeClient,
  mediaNodeId,
  RecordingService,
  SlateImageService,
  RtmpOutputService,
  SoundtrackService,
  scaleOutStreams,
  StreamLifecycle,
  StreamService,
  type LifecycleClock,
  type MediaNodeClient,
  type ScaleOutStreams,
  type StreamLifecycleOptions,
} from '../streams/index.ts';
import type { Config } from './config.ts';
import { LiveRouter } from './LiveRouter.ts';
import { registerMediaMetrics } from './MediaMetrics.ts';
import type { RoleDeps } from './RoleDeps.ts';
import type { Services } from './Services.ts';

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
  /** Fetches IP-Adapter style images (the SSRF-safe client); without it only data: URLs work. */
  fetchImage?: FetchImage;
  /** The outbound client of admission hooks and JWKS fetches (the webhooks' address rules); without it those rules refuse. */
  admissionClient?: SafeHttpClient;
}

export interface StreamRoles {
  services: Services;
  node: MediaNode | null;
  media: MediaNodeClient;
  lifecycle: StreamLifecycle | null;
  close(): Promise<void>;
}

/** A client for a process without a media node: no nodes, nothing to reach. */
class NoMediaNodes implements MediaNodeClient {
  async nodes() {
    return [];
  }
  async updateParams() {
    return { delivered: false };
  }
  async status() {
    return null;
  }
  async endStream() {
    return false;
  }
  async clip() {
    return null;
  }
  async setSoundtrack() {
    return false;
  }
  async setRtmpDestinations() {
    return false;
  }
  async setRecording() {
    return false;
  }
  async cancelScheduled() {
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
  /** This process's own node behind its direct client (media role). */
  let local: InProcessMediaNodeClient | null = null;
  /** The process's one decoder for client images (slate images here and on the node): its slot cap is per process. */
  const images = new ImageDecoder(config.images);
  let service: StreamService | null = null;
  let recordings: RecordingService | null = null;
  let admission: AdmissionService | null = null;

  const outboundPolicy = new AddressPolicy({ allowLoopback: config.allowLoopbackTargets });
  if (has('media')) {
    const { models, demo } = await prepareModels(config.modelsDir, config.demoModels, deps.logger);
    const rtc = config.webrtc;
    const interfaces = overrides.iceAddresses ?? rtc.interfaces;
    node = new MediaNode({
      publicUrl: config.publicUrl,
      logger: deps.logger,
      capacity: overrides.capacity ?? config.mediaCapacity,
      ...(interfaces ? { iceAddresses: interfaces } : {}),
      ...(rtc.announcedAddresses.length > 0 ? { announcedAddresses: rtc.announcedAddresses } : {}),
      ...(rtc.udpPortRange ? { udpPortRange: rtc.udpPortRange } : {}),
      iceTcp: rtc.iceTcp,
      udpRecvBufferBytes: rtc.udpRecvBufferBytes,
      stunUrls: rtc.stunUrls,
      ...(rtc.turn ? { turn: rtc.turn } : {}),
      ...(deps.forwardedSecret ? { forwardedSecret: deps.forwardedSecret } : {}),
      // The operator's limits (WHEP_WAITING_*), then what a test or benchmark overrides.
      settings: { ...config.media, ...overrides.mediaSettings },
      // RTMP pushes reach only what a webhook may (public unicast; loopback when allowed for tests).
      outboundPolicy,
      // Recordings go into the shared blob store, where every API role reads them.
      recordingsDir: deps.blobs.pathOf('recordings'),
      // Slate images the API stored for a stream, read by whichever node holds it.
      slatesDir: deps.blobs.pathOf('slates'),
      songsDir: deps.blobs.pathOf('songs'),
      images,
      // Diffusion when this node has models; image processors only otherwise (skip_diffusion semantics).
      createProcessor: overrides.createProcessor ?? (models.length > 0 ? diffusionProcessorFactory({ modelsDir: config.modelsDir, imageLimits: config.images, ...(overrides.fetchImage ? { fetchImage: overrides.fetchImage } : {}) }) : defaultProcessorFactory),
      // The service exists below whenever the api role runs here; a media-only process without a
      // store-backed resolver refuses every publisher.
      resolveIngest: (streamId, bearer) => service?.resolveIngest(streamId, bearer) ?? Promise.resolve(null),
      resolvePlayback: async (playbackId) => {
        const found = await service?.resolvePlayback(playbackId);
        if (!found) return null;
        const { nodeId, ...target } = found;
        // Scale-out: a stream another live node holds is relayed here (this node is its edge, decision 0030).
        if (!scaleOut || !local || nodeId === undefined || nodeId === local.nodeId) return target;
        const owner = (await media.nodes()).find((n) => n.id === nodeId);
        return { ...target, origin: owner ? { nodeId: owner.id, url: owner.publicUrl } : undefined };
      },
      // Admission rules (hooks, JWTs) of the stream or its account, asked before any session exists.
      admit: (request) => admission?.admit(request) ?? Promise.resolve({ admitted: true }),
    });
    if (demo) deps.logger.warn(`startStreamRoles() | media node serves DEMO models (tiny, random weights) for some of ${models.join(', ')}`);
    local = new InProcessMediaNodeClient({
      node,
      // Scale-out: registered under its address, unique per node.
      ...(deps.store.kind === 'redis' ? { nodeId: mediaNodeId(config.publicUrl) } : {}),
      models,
      demo,
      logger: deps.logger,
      blobs: deps.blobs,
      ...(deps.now ? { now: deps.now } : {}),
    });
    media = local;
    registerMediaMetrics(deps.metrics, node);
    const n = node;
    services.mediaRoutes = async (app) => {
      registerMediaRoutes(app, n);
    };
  }

  // Scale-out (shared store): every node, this one included, is reached over the store's bus; the
  // parts below are the same objects as in the embedded default (streams/ScaleOut.ts).
  let scaleOut: ScaleOutStreams | null = null;
  if (deps.store.kind === 'redis') {
    scaleOut = scaleOutStreams({
      store: deps.store,
      logger: deps.logger,
      local: node && local ? { node, client: local } : null,
      sweep: has('worker'),
      ...(deps.now ? { now: deps.now } : {}),
    });
    media = scaleOut.media;
    // WHIP/WHEP/HLS are served (forwarded to the owning node) by api and media roles: the local
    // node's routes behind forwarding, or forwarding alone.
    if (has('api') || has('media')) {
      const n = node;
      services.mediaRoutes = new LiveRouter({
        store: deps.store,
        media: scaleOut.media,
        logger: deps.logger,
        ...(deps.forwardedSecret ? { forwardedSecret: deps.forwardedSecret } : {}),
        cascadeOriginViewers: config.cascadeOriginViewers,
        ...(n && local ? { local: { nodeId: local.nodeId, routes: (app) => registerMediaRoutes(app, n) } } : {}),
      }).plugin();
    } else delete services.mediaRoutes;
  }

  // The resolvers above need the service even when this process does not serve the REST API.
  if (has('api') || has('media')) {
    service = new StreamService({
      store: deps.store,
      media,
      publicUrl: config.publicUrl,
      logger: deps.logger,
      outboundPolicy,
      deletedStatusTtlMs: config.deletedStreamStatusTtlS * 1000,
      renditions: config.media.renditions.map((r) => r.name),
      ...(deps.now ? { now: deps.now } : {}),
    });
    const gate = new AdmissionGate({ client: overrides.admissionClient ?? null, settings: config.admission, logger: deps.logger, ...(deps.now ? { now: deps.now } : {}) });
    // Requests a rule decided (served from the decision cache or not), and the hook calls made: their ratio is the cache's worth.
    const checks = deps.metrics.counter('reverie_admission_checks_total', 'Publish and play requests an admission rule decided.', ['action', 'protocol', 'rule', 'result']);
    deps.metrics.counter('reverie_admission_hook_calls_total', 'Admission hook calls made (decisions not served from the cache).', [], (c) => {
      c.reset();
      c.inc(gate.hookCalls);
    });
    admission = new AdmissionService({
      store: deps.store,
      gate,
      policy: overrides.admissionClient?.policy ?? outboundPolicy,
      settings: config.admission,
      logger: deps.logger,
      onDecision: (d) => checks.inc({ action: d.action, protocol: d.protocol, rule: d.rule, result: d.admitted ? 'admitted' : 'refused' }),
      ...(deps.now ? { now: deps.now } : {}),
    });
    if (has('api')) {
      services.streams = service;
      services.admission = admission;
      services.rtmpOutputs = new RtmpOutputService({ store: deps.store, media, streams: service, logger: deps.logger });
      services.soundtracks = new SoundtrackService({ store: deps.store, media, logger: deps.logger, ...(deps.now ? { now: deps.now } : {}) });
      if (deps.links) {
        recordings = new RecordingService({
          store: deps.store,
          media,
          blobs: deps.blobs,
          links: deps.links,
          publicUrl: config.publicUrl,
          caps: { maxBytes: config.recording.maxBytes, maxAgeHours: config.recording.maxAgeHours },
          logger: deps.logger,
          ...(deps.now ? { now: deps.now } : {}),
        });
        recordings.startSweeping(config.recording.sweepIntervalS * 1000);
        services.recordings = recordings;
      }
      services.slates = new SlateImageService({ store: deps.store, blobs: deps.blobs, images, ...(overrides.fetchImage ? { fetchImage: overrides.fetchImage } : {}), logger: deps.logger, ...(deps.now ? { now: deps.now } : {}) });
      // Slate images stored by an older version: normalised in the background (bounded by the decoder's slots).
      services.slates.migrateLegacy().catch((err: unknown) => deps.logger.warn({ err }, 'slate images | migration of stored images failed'));
      services.clips = new ClipService({ store: deps.store, media, blobs: deps.blobs, publicUrl: config.publicUrl, logger: deps.logger, ...(deps.now ? { now: deps.now } : {}) });
    }
  }

  let lifecycle: StreamLifecycle | null = null;
  // Scale-out: node events reach every worker over the bus, so media processes need no supervisor.
  if (has('worker') || (has('media') && !scaleOut)) {
    lifecycle = new StreamLifecycle({
      store: deps.store,
      media,
      logger: deps.logger,
      ...overrides.lifecycle,
      ...(overrides.lifecycleClock ? { clock: overrides.lifecycleClock } : deps.now ? { clock: { now: deps.now, setInterval, clearInterval: (h) => clearInterval(h as NodeJS.Timeout) } } : {}),
    });
    await lifecycle.start();
  }
  await scaleOut?.start();

  let closing: Promise<void> | null = null;
  return {
    services,
    node,
    media,
    lifecycle,
    close() {
      closing ??= (async () => {
        // Streams before the supervisor, so the last `ended` events are recorded.
        const steps = [() => node?.close(), () => node?.recordingsEnded(), () => recordings?.close(), () => scaleOut?.close(), () => lifecycle?.close(), () => media.close()];
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

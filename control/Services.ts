/**
 * What the control plane can be handed. The routes mounted depend on which are present, so an
 * `api` process wires every service while tests pass only what they exercise.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import type { BlobStore, Store } from '../store/index.ts';
import type { SongService } from '../songs/index.ts';
import type { WebhookService } from '../webhooks/index.ts';
import type { LinkSigner } from './LinkSigner.ts';
import type { Metrics } from './Metrics.ts';
import type { AdmissionService, ClipService, RecordingService, RtmpOutputService, SlateImageService, SoundtrackService, StreamService } from '../streams/index.ts';

export interface Services {
  /** Area A. Without it only /usage answers (503). */
  songs?: SongService;
  /** Where song files live; needed with `songs`. */
  blobs?: BlobStore;
  /** Signs short-lived download links; needed with `songs`. */
  links?: LinkSigner;
  /** Area B streams (create, update, status, delete). */
  streams?: StreamService;
  /** Clips of live streams; mounted with `streams`. */
  clips?: ClipService;
  /** Recordings of streams' output; mounted with `streams`. */
  recordings?: RecordingService;
  /** Streams' slate images; mounted with `streams`. */
  slates?: SlateImageService;
  /** Admission rules of streams and accounts; mounted with `streams`. */
  admission?: AdmissionService;
  /** Extra RTMP destinations of streams; mounted with `streams`. */
  rtmpOutputs?: RtmpOutputService;
  /** Streams' soundtracks (a song's take in the output audio); mounted with `streams`. */
  soundtracks?: SoundtrackService;
  /** Area B webhook management. */
  webhooks?: WebhookService;
  /** The media node's WHIP/WHEP routes (embedded default and `media` role). */
  mediaRoutes?: FastifyPluginAsync;
  /** The pages people use (web/). */
  webRoutes?: FastifyPluginAsync;
}

/** What the routes get: the services this process runs, and the store, logger and metrics. */
export interface AppContext extends Services {
  store: Store;
  logger: Logger;
  metrics: Metrics;
  /** False while starting or draining; /healthz answers 503 then. */
  isReady?: () => boolean;
}

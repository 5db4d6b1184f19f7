/**
 * What the control plane can be handed. The routes mounted depend on which are present, so an
 * `api` process wires every service while tests pass only what they exercise.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { BlobStore } from '../store/index.ts';
import type { SongService } from '../songs/SongService.ts';
import type { WebhookService } from '../webhooks/index.ts';
import type { LinkSigner } from './LinkSigner.ts';
import type { ClipService } from './ClipService.ts';
import type { RecordingService } from './RecordingService.ts';
import type { RtmpOutputService } from './RtmpOutputService.ts';
import type { StreamService } from './StreamService.ts';

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
  /** Extra RTMP destinations of streams; mounted with `streams`. */
  rtmpOutputs?: RtmpOutputService;
  /** Area B webhook management. */
  webhooks?: WebhookService;
  /** The media node's WHIP/WHEP routes (embedded default and `media` role). */
  mediaRoutes?: FastifyPluginAsync;
  /** The pages people use (web/). */
  webRoutes?: FastifyPluginAsync;
}

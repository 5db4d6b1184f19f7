/**
 * A media node's HTTP endpoints, mounted on a fastify app: WHIP/WHEP (an encapsulated plugin with
 * its own SDP body parsers) and, when HLS is on, the LL-HLS playlists and parts. The routes call the
 * node; the node knows nothing of HTTP.
 */
import type { FastifyInstance } from 'fastify';
import { hlsRoutes } from './HlsRoutes.ts';
import type { MediaNode } from './MediaNode.ts';
import { whipWhepRoutes } from './WhipWhepRoutes.ts';

export function registerMediaRoutes(app: FastifyInstance, node: MediaNode): void {
  void app.register(whipWhepRoutes, { node });
  if (node.settings.hlsEnabled) void app.register(hlsRoutes, { node });
}

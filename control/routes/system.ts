/**
 * Operability routes: /healthz (200 when ready), /metrics (Prometheus text), /openapi.json
 * (the OpenAPI 3.1 document generated from the route schemas; /docs renders it).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { AppContext } from '../buildApp.ts';
import type { Config } from '../config.ts';
import { streamError } from '../errors.ts';

export function systemRoutes(config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>();
    r.get(
      '/healthz',
      {
        config: { public: true },
        schema: {
          hide: true,
          response: {
            200: z.object({ status: z.literal('ok'), store: z.string(), roles: z.array(z.string()) }),
            503: z.object({ status: z.literal('unavailable'), reason: z.string() }),
          },
        },
      },
      async (_req, reply) => {
        if (ctx.isReady && !ctx.isReady()) return reply.code(503).send({ status: 'unavailable' as const, reason: 'starting or draining' });
        try {
          await ctx.store.ping();
        } catch (err) {
          // The reason goes to our log, not to whoever asks (it can name hosts and ports).
          ctx.logger.warn({ err }, 'healthz | store unreachable');
          return reply.code(503).send({ status: 'unavailable' as const, reason: 'store unreachable' });
        }
        return { status: 'ok' as const, store: ctx.store.kind, roles: [...config.roles] };
      },
    );

    const metricsAuth = config.metricsToken ? createHash('sha256').update(`Bearer ${config.metricsToken}`).digest() : null;
    r.get('/metrics', { config: { public: true }, schema: { hide: true } }, async (req, reply) => {
      if (metricsAuth && !timingSafeEqual(createHash('sha256').update(req.headers.authorization ?? '').digest(), metricsAuth)) {
        throw streamError('AUTH/UNAUTHORIZED', '/metrics needs Authorization: Bearer <METRICS_TOKEN>.', { headers: { 'www-authenticate': 'Bearer realm="metrics"' } });
      }
      const body = await ctx.metrics.registry.metrics();
      return reply.type(ctx.metrics.registry.contentType).send(body);
    });

    r.get('/openapi.json', { config: { public: true }, schema: { hide: true } }, async () => app.swagger());
  };
}

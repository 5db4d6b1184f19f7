/**
 * Operability routes: /livez (the process answers: restart it when this fails), /readyz (ready
 * and its store reachable: route traffic to it only while this is 200; /healthz is the same, kept
 * for load balancers configured before the split), /metrics (Prometheus text), /openapi.json (the
 * OpenAPI 3.1 document generated from the route schemas; /docs renders it).
 *
 * Liveness never looks at the store: a Redis outage makes every process unready (503 on /readyz)
 * but must not make an orchestrator restart them all — live streams keep flowing through one.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { streamError } from '../../errors/index.ts';

/**
 * How long /readyz waits for the store, ms. During a Redis outage the client holds commands until
 * it reconnects (up to ≈ 10 s); a probe must get its answer before the orchestrator's own timeout
 * (Kubernetes' default is 1 s), so an unanswered ping counts as unreachable.
 */
const READY_PING_TIMEOUT_MS = 800;

async function pingWithin(store: AppContext['store'], ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  try {
    await Promise.race([store.ping(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export function systemRoutes(config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>();
    const internal = { config: { public: true }, schema: { hide: true } } as const;
    r.get(
      '/livez',
      { config: { public: true }, schema: { hide: true, response: { 200: z.object({ status: z.literal('ok'), uptime_s: z.number() }) } } },
      // Draining is still alive: the orchestrator must let the drain finish, not kill it.
      async () => ({ status: 'ok' as const, uptime_s: Math.round(process.uptime()) }),
    );
    const readiness = {
      config: { public: true },
      schema: {
        hide: true,
        response: {
          200: z.object({ status: z.literal('ok'), store: z.string(), roles: z.array(z.string()) }),
          503: z.object({ status: z.literal('unavailable'), reason: z.string() }),
        },
      },
    } as const;
    const ready = async (_req: unknown, reply: FastifyReply) => {
      if (ctx.isReady && !ctx.isReady()) return reply.code(503).send({ status: 'unavailable' as const, reason: 'starting or draining' });
      try {
        await pingWithin(ctx.store, READY_PING_TIMEOUT_MS);
      } catch (err) {
        // The reason goes to our log, not to whoever asks (it can name hosts and ports).
        ctx.logger.warn({ err }, 'readyz | store unreachable');
        return reply.code(503).send({ status: 'unavailable' as const, reason: 'store unreachable' });
      }
      return { status: 'ok' as const, store: ctx.store.kind, roles: [...config.roles] };
    };
    r.get('/readyz', readiness, ready);
    r.get('/healthz', readiness, ready);

    const metricsAuth = config.metricsToken ? createHash('sha256').update(`Bearer ${config.metricsToken}`).digest() : null;
    r.get('/metrics', internal, async (req, reply) => {
      if (metricsAuth && !timingSafeEqual(createHash('sha256').update(req.headers.authorization ?? '').digest(), metricsAuth)) {
        throw streamError('AUTH/UNAUTHORIZED', '/metrics needs Authorization: Bearer <METRICS_TOKEN>.', { headers: { 'www-authenticate': 'Bearer realm="metrics"' } });
      }
      const body = await ctx.metrics.registry.metrics();
      return reply.type(ctx.metrics.registry.contentType).send(body);
    });

    r.get('/openapi.json', internal, async () => app.swagger());
  };
}

/**
 * `GET /v1/capabilities`: what this deployment serves now (streams/Capabilities.ts), so clients
 * build their controls from it instead of hard-coding model and processor lists.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { AppContext } from '../Services.ts';
import { CapabilitiesSchema, describeCapabilities } from '../../streams/index.ts';
import type { Config } from '../config.ts';
import { EnvelopeErrorSchema } from './streams.ts';

export function capabilitiesRoutes(_config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const service = ctx.streams;
    if (!service) return;
    app.withTypeProvider<ZodTypeProvider>().get(
      '/v1/capabilities',
      {
        schema: {
          tags: ['streams'],
          summary: 'Models served now (real or demo), their ControlNets and IP-Adapter types, preprocessors and processors with their param schemas, hot params, control limits',
          response: { 200: CapabilitiesSchema, 401: EnvelopeErrorSchema, 503: EnvelopeErrorSchema },
        },
      },
      async () => describeCapabilities(await service.nodes(), service.updateRate),
    );
  };
}

/**
 * A stream's extra RTMP destinations (Area B error shape): read them with each push's live state,
 * or replace the list — enabling, disabling, adding or removing destinations while the stream is
 * live. `output_rtmp_url` is listed first (read-only here: it is set at create, as the spec has it).
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Account } from '../../store/index.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { EnvelopeErrorSchema, RtmpOutputsSchema } from './streams.ts';

const OutputSchema = z
  .object({
    name: z.string(),
    url: z.string().describe('The stream key is shown as …'),
    enabled: z.boolean(),
    rendition: z.string().nullable().describe('The rendition pushed; null: the full encode'),
    state: z.enum(['disabled', 'idle', 'connecting', 'live', 'reconnecting', 'closed']).describe('idle: no publisher right now'),
    reconnects: z.number().int(),
    live_since: z.number().nullable().describe('ms since the epoch'),
    last_error: z.string().nullable(),
  })
  .meta({ id: 'RtmpOutput' });
const Outputs = z.object({ success: z.literal(true), data: z.array(OutputSchema) });
const IdParams = z.object({ id: z.string().min(1).max(100) });
const errors = { 400: EnvelopeErrorSchema, 401: EnvelopeErrorSchema, 404: EnvelopeErrorSchema, 503: EnvelopeErrorSchema };

export function outputRoutes(_config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const outputs = ctx.rtmpOutputs;
    if (!outputs) return;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['streams'];
    const acc = (req: { account: Account | null }) => req.account!;
    r.get(
      '/v1/streams/:id/outputs',
      { schema: { tags, summary: "The stream's RTMP destinations with each push's state", params: IdParams, response: { 200: Outputs, ...errors } } },
      async (req) => ({ success: true as const, data: await outputs.list(acc(req), req.params.id) }),
    );
    r.put(
      '/v1/streams/:id/outputs',
      {
        schema: {
          tags,
          summary: 'Replace the extra RTMP destinations; applied live (unchanged ones keep their connection)',
          params: IdParams,
          body: z.object({ outputs: RtmpOutputsSchema }).strict(),
          response: { 200: Outputs, ...errors },
        },
      },
      async (req) => ({ success: true as const, data: await outputs.set(acc(req), req.params.id, req.body.outputs) }),
    );
  };
}

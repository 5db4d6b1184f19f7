/**
 * A stream's slate image (Area B error shape): set, read and remove the picture its outputs show
 * while the publisher is away (instead of the greyed last frame). The image is fetched through the
 * outbound address policy (as webhooks are) or given inline as a `data:` URL, and must decode as a
 * PNG, JPEG, WebP or GIF within the operator's image caps (IMAGE_MAX_BYTES, IMAGE_MAX_PIXELS;
 * default 5 MiB, 4096² px). While every decode slot is taken the answer is 503 + Retry-After.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Account } from '../../store/index.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { EnvelopeErrorSchema } from './streams.ts';

export const SlateImageSchema = z
  .object({
    image_url: z.string().nullable().describe('The http(s) URL set, `data:` for an inline image, null when none'),
    size: z.number().int().describe('Bytes of the stored image; 0 when none'),
    updated_at: z.string().nullable(),
  })
  .meta({ id: 'SlateImage' });

const StreamParams = z.object({ id: z.string().min(1).max(100) });
const errors = { 400: EnvelopeErrorSchema, 401: EnvelopeErrorSchema, 404: EnvelopeErrorSchema, 413: EnvelopeErrorSchema, 503: EnvelopeErrorSchema };

export function slateRoutes(config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  /** A base64 data: URL of the largest image, plus its header, chars. */
  const URL_MAX = Math.ceil((config.images.maxBytes * 4) / 3) + 100;
  /** The body holds at most one such URL, bytes. */
  const BODY_LIMIT = URL_MAX + 1024;
  return async (app) => {
    const slates = ctx.slates;
    if (!slates) return;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['streams'];
    const acc = (req: { account: Account | null }) => req.account!;

    r.put(
      '/v1/streams/:id/slate',
      {
        bodyLimit: BODY_LIMIT,
        schema: {
          tags,
          summary: 'Set the picture the outputs show while the publisher is away (fetched and checked now; shown from the next slate frame on)',
          params: StreamParams,
          body: z
            .object({
              image_url: z
                .string()
                .max(URL_MAX)
                .regex(/^(https?:\/\/|data:)/i, 'an http(s) URL or a base64 data: URL')
                .describe('http(s) URL (fetched once, through the same address rules as webhooks) or data:image/…;base64,…'),
            })
            .strict(),
          response: { 200: SlateImageSchema, ...errors },
        },
      },
      async (req) => slates.set(acc(req), req.params.id, req.body.image_url),
    );

    r.get(
      '/v1/streams/:id/slate',
      { schema: { tags, summary: "The stream's slate image, if any", params: StreamParams, response: { 200: SlateImageSchema, ...errors } } },
      async (req) => slates.get(acc(req), req.params.id),
    );

    r.delete(
      '/v1/streams/:id/slate',
      { schema: { tags, summary: 'Remove the slate image (the slate shows the greyed last frame again)', params: StreamParams, response: { 200: z.object({ success: z.literal(true), data: z.object({}).strict() }), ...errors } } },
      async (req) => {
        await slates.clear(acc(req), req.params.id);
        return { success: true as const, data: {} };
      },
    );
  };
}

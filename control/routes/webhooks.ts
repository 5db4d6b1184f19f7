/**
 * Area B webhook management (spec "Area B: webhook management"). Thin: validation here, rules in
 * webhooks/WebhookService. Statuses the spec leaves "not shown" are chosen in docs/api.md:
 * create 201, delete 200 with `{ success, id }`, a rejected URL 422, the 11th endpoint 409.
 * Beyond the spec: recover and resend answer 202 (the sends happen later, from the queue); the
 * attempts log 200. A delivery id the route did not get from us is simply not found.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EVENT_TYPES, isWebhookError, WEBHOOK_SERVICE_DEFAULTS, type WebhookService } from '../../webhooks/index.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { streamError } from '../../errors/index.ts';
import { EnvelopeErrorSchema } from './streams.ts';

/** `stream.*` events, and the operational `webhook.*` ones about the account's other endpoints (docs/webhooks.md). */
const EVENT = z.enum(EVENT_TYPES);

const EndpointSchema = z
  .object({
    id: z.string().regex(/^whk_/),
    url: z.string(),
    events: z.array(EVENT),
    name: z.string(),
    secret: z.string().regex(/^whsec_/).optional().describe('Only on create and rotate-secret'),
    secret_preview: z.string(),
    is_active: z.boolean(),
    consecutive_failures: z.number().int(),
    rate_limit: z.number().int().nullable().describe('Deliveries per second at most, across all workers; null: no limit'),
    created_at: z.string(),
  })
  .meta({ id: 'WebhookEndpoint' });

const { minRateLimit, maxRateLimit } = WEBHOOK_SERVICE_DEFAULTS;
const RateLimit = z
  .number()
  .int()
  .min(minRateLimit)
  .max(maxRateLimit)
  .nullable()
  .describe(`Deliveries per second at most (${minRateLimit}–${maxRateLimit}), across all workers; null: no limit. Deliveries over it wait for their slot, unsent`);

const DeliverySchema = z
  .object({
    id: z.string(),
    endpoint_id: z.string(),
    event_id: z.string(),
    event_type: z.string(),
    stream_id: z.string().nullable(),
    status: z.enum(['pending', 'succeeded', 'failed']),
    attempts: z.number().int().describe('Sends so far, the first included: at most 8, then the delivery is failed'),
    response_status: z.number().int().nullable(),
    response_body: z.string().nullable(),
    error: z.string().nullable(),
    payload: z.string().describe('The exact JSON body sent (the signed bytes)'),
    created_at: z.string(),
    updated_at: z.string(),
    last_attempt_at: z.string().nullable(),
    next_attempt_at: z.string().nullable().describe('When the next send is due while pending; null once succeeded or failed'),
  })
  .meta({ id: 'WebhookDelivery' });

const TestResultSchema = z
  .object({
    status: z.number().int().nullable(),
    body: z.string().nullable(),
    round_trip_ms: z.number(),
    error: z.string().nullable(),
    event_id: z.string(),
  })
  .meta({ id: 'WebhookTestResult' });

const AttemptSchema = z
  .object({
    attempt: z.number().int().describe("The delivery's send count after this send (1 for the first)"),
    trigger: z.enum(['scheduled', 'resend', 'recover']).describe('scheduled: the first send or a retry; resend or recover: asked for through the API'),
    started_at: z.string(),
    duration_ms: z.number(),
    response_status: z.number().int().nullable().describe('null when no response came (timeout, connection or TLS error)'),
    response_body: z.string().nullable().describe("The response body's first 1 KiB"),
    error: z.string().nullable().describe('null on a 2xx; otherwise why the send failed'),
  })
  .meta({ id: 'WebhookAttempt' });

const RecoverResultSchema = z
  .object({
    requeued: z.number().int().describe('Failed deliveries queued for one more send each'),
    delivery_ids: z.array(z.string()),
    has_more: z.boolean().describe('More failed deliveries remain in the window: call again with the same window'),
  })
  .meta({ id: 'WebhookRecoverResult' });

const IdParams = z.object({ id: z.string().min(1).max(100) });
const DeliveryParams = z.object({ id: z.string().min(1).max(100), delivery_id: z.string().min(1).max(100) });
const errors = { 400: EnvelopeErrorSchema, 401: EnvelopeErrorSchema, 404: EnvelopeErrorSchema, 409: EnvelopeErrorSchema, 422: EnvelopeErrorSchema };
const limited = { ...errors, 429: EnvelopeErrorSchema };

/** Renders the webhooks area's typed errors (Area B codes) in the envelope. */
function mapped<T>(fn: () => Promise<T>): Promise<T> {
  return fn().catch((err: unknown) => {
    if (!isWebhookError(err)) throw err;
    const retryAfter = err.details.retry_after_seconds;
    throw streamError(err.code, err.message, { details: err.details, ...(retryAfter !== undefined ? { headers: { 'retry-after': String(retryAfter) } } : {}) });
  });
}

export function webhookRoutes(_config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const service: WebhookService | undefined = ctx.webhooks;
    if (!service) return;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['webhooks'];
    const acc = (req: { account: { id: string } | null }) => req.account!.id;

    r.post(
      '/v1/webhooks',
      {
        schema: {
          tags,
          summary: 'Register an endpoint; the response holds the full secret, shown only now',
          body: z.object({ url: z.string().min(1).max(2048), events: z.array(EVENT).min(1).max(EVENT_TYPES.length), name: z.string().max(200).optional(), rate_limit: RateLimit.optional() }).strict(),
          response: { 201: EndpointSchema, ...errors },
        },
      },
      async (req, reply) => {
        const view = await mapped(() => service.create(acc(req), req.body));
        reply.code(201);
        return view;
      },
    );

    r.get('/v1/webhooks', { schema: { tags, summary: 'List endpoints and their delivery health', response: { 200: z.object({ data: z.array(EndpointSchema) }), 401: EnvelopeErrorSchema } } }, async (req) => ({
      data: await service.list(acc(req)),
    }));

    r.get('/v1/webhooks/:id', { schema: { tags, params: IdParams, response: { 200: EndpointSchema, ...errors } } }, async (req) => mapped(() => service.get(acc(req), req.params.id)));

    r.patch(
      '/v1/webhooks/:id',
      {
        schema: {
          tags,
          summary: 'Change url, events, name, is_active (true re-enables and clears the failure count) or rate_limit',
          params: IdParams,
          body: z.object({ url: z.string().min(1).max(2048).optional(), events: z.array(EVENT).min(1).max(EVENT_TYPES.length).optional(), name: z.string().max(200).optional(), is_active: z.boolean().optional(), rate_limit: RateLimit.optional() }).strict(),
          response: { 200: EndpointSchema, ...errors },
        },
      },
      async (req) => mapped(() => service.update(acc(req), req.params.id, req.body)),
    );

    r.delete(
      '/v1/webhooks/:id',
      { schema: { tags, summary: 'Delete the endpoint and its delivery log', params: IdParams, response: { 200: z.object({ success: z.literal(true), id: z.string() }), ...errors } } },
      async (req) => {
        await mapped(() => service.delete(acc(req), req.params.id));
        return { success: true as const, id: req.params.id };
      },
    );

    r.post(
      '/v1/webhooks/:id/rotate-secret',
      { schema: { tags, summary: 'Issue a new signing secret; the old one stops signing when this returns', params: IdParams, response: { 200: EndpointSchema, ...errors } } },
      async (req) => mapped(() => service.rotateSecret(acc(req), req.params.id)),
    );

    r.post(
      '/v1/webhooks/:id/test',
      { schema: { tags, summary: 'Send a synthetic, signed stream.ended now and return what the endpoint answered (at most 10 per minute per account)', params: IdParams, response: { 200: TestResultSchema, ...errors, 429: EnvelopeErrorSchema } } },
      async (req) => mapped(() => service.test(acc(req), req.params.id)),
    );

    r.get(
      '/v1/webhooks/:id/deliveries',
      {
        schema: {
          tags,
          summary: 'Delivery history, newest first',
          params: IdParams,
          querystring: z.object({
            limit: z.coerce.number().int().min(1).max(100).default(20),
            cursor: z.string().min(1).max(500).optional(),
            status: z.enum(['pending', 'succeeded', 'failed']).optional(),
            event_type: EVENT.optional(),
            stream_id: z.string().min(1).max(100).optional(),
          }),
          response: { 200: z.object({ data: z.array(DeliverySchema), next_cursor: z.string().nullable() }), ...errors },
        },
      },
      async (req) => {
        const page = await mapped(() => service.deliveries(acc(req), req.params.id, req.query)).catch((err: unknown) => {
          if ((err as { code?: string }).code === 'invalid_cursor') throw streamError('REQUEST/INVALID', 'cursor: not a cursor this API returned', { details: { field: 'cursor' } });
          throw err;
        });
        return { data: page.items, next_cursor: page.next_cursor };
      },
    );

    r.get(
      '/v1/webhooks/:id/deliveries/:delivery_id/attempts',
      {
        schema: {
          tags,
          summary: 'Every send of one delivery, oldest first: time, duration, status or network error, first 1 KiB of the response (the last 20 kept)',
          params: DeliveryParams,
          response: { 200: z.object({ data: z.array(AttemptSchema) }), ...errors },
        },
      },
      async (req) => ({ data: await mapped(() => service.attempts(acc(req), req.params.id, req.params.delivery_id)) }),
    );

    r.post(
      '/v1/webhooks/:id/deliveries/:delivery_id/resend',
      {
        schema: {
          tags,
          summary: 'Send one delivery again (same event id and body, signed afresh): one send, no retry schedule. Rate-limited per account',
          params: DeliveryParams,
          response: { 202: DeliverySchema, ...limited },
        },
      },
      async (req, reply) => {
        const view = await mapped(() => service.resend(acc(req), req.params.id, req.params.delivery_id));
        reply.code(202);
        return view;
      },
    );

    r.post(
      '/v1/webhooks/:id/recover',
      {
        schema: {
          tags,
          summary: 'Queue one more send of every failed delivery of the endpoint created in [since, until) (same event ids). Rate-limited per account',
          params: IdParams,
          body: z
            .object({
              since: z.string().min(1).max(64).describe('ISO 8601 date-time with a zone; deliveries created at or after it'),
              until: z.string().min(1).max(64).optional().describe('ISO 8601 date-time with a zone; deliveries created before it. Default: now'),
            })
            .strict(),
          response: { 202: RecoverResultSchema, ...limited },
        },
      },
      async (req, reply) => {
        const result = await mapped(() => service.recover(acc(req), req.params.id, req.body));
        reply.code(202);
        return result;
      },
    );
  };
}


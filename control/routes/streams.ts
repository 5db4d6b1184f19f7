/**
 * Area B stream routes (spec "Area B: streams"). Thin: shape validation here (zod, so the OpenAPI
 * document shows every rule), everything else in StreamService. The envelope schema here is shared
 * by every Area B route for its documented failure responses. Choices the spec leaves "not shown"
 * are in docs/api.md ("Area B streams choices"): create 201, DELETE `{ success, data: {} }`, list
 * `{ success, data, next_cursor }`.
 */
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { MAX_RTMP_DESTINATIONS, PRIMARY_RTMP } from '../../media/index.ts';
import type { Account } from '../../store/index.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { BETA_MODEL_IDS, ParamsInputSchema, StreamParamsSchema, type StreamControl, type UpdateOutcome } from '../../streams/index.ts';

export const EnvelopeErrorSchema = z
  .object({
    success: z.literal(false),
    error: z.string(),
    code: z.string(),
    status: z.number().int(),
    details: z.unknown(),
    requestId: z.string(),
    traceId: z.string(),
  })
  .meta({ id: 'ErrorEnvelope' });

export const StreamSchema = z
  .object({
    id: z.string().regex(/^str_/),
    stream_key: z.string().describe('Secret: the Bearer token for WHIP ingest'),
    whip_url: z.url(),
    output_playback_id: z.string(),
    output_stream_url: z.url().describe('WHEP URL of the processed output'),
    gateway_host: z.string(),
    params: StreamParamsSchema,
    name: z.string(),
    author: z.string().describe('Account id of the creator'),
    from_playground: z.boolean(),
    is_smoke_test: z.boolean(),
    created_at: z.string(),
    pipeline: z.literal('streamdiffusion'),
    record: z.boolean().describe('Whether the output is recorded (GET /v1/streams/{id}/recordings). An addition to the spec'),
  })
  .meta({ id: 'Stream' });

const ScheduledViewSchema = z.object({
  id: z.string(),
  due_at: z.number().describe('ms since the epoch'),
  on_beat: z.boolean(),
  keys: z.array(z.string()).describe('The params the change sets'),
  transition: z.object({ steps: z.number().int(), method: z.enum(['linear', 'slerp']) }).nullable(),
});

const TrackStats = z.object({
  type: z.string(),
  jitter: z.number(),
  packets_lost: z.number().int(),
  packets_received: z.number().int(),
  packet_loss_pct: z.number(),
  rtt: z.number(),
  warnings: z.array(z.string()),
});

const StatusDataSchema = z.object({
  stream_id: z.string(),
  request_id: z.string(),
  pipeline_id: z.string(),
  type: z.string(),
  pipeline: z.string(),
  state: z.enum(['OFFLINE', 'LOADING', 'ONLINE', 'DEGRADED_INPUT', 'DEGRADED_INFERENCE', 'ERROR']),
  last_state_update_time: z.number().optional().describe('ms; absent when OFFLINE'),
  end_reason: z
    .enum(['timeout', 'deleted', 'credits_exhausted'])
    .optional()
    .describe('When OFFLINE because the session ended (the stream.ended reason) or the stream was deleted (`deleted`, for DELETED_STREAM_STATUS_TTL seconds after the DELETE, then 404); absent otherwise. An addition to the spec'),
  demo: z.boolean().describe('True when the node runs demo stand-ins for the models'),
  stage_latency_ms: z
    .partialRecord(z.enum(['decode', 'process', 'encode', 'node']), z.object({ p50: z.number(), p95: z.number() }))
    .optional()
    .describe('ms per stage on the media node (p50/p95 over its recent frames): decode, process, encode, and node = decoded frame in → encoded frame out. Absent when OFFLINE. An addition to the spec'),
  viewers: z.number().int().optional().describe("WHEP viewers now on the stream's own node (edges' pulls included); absent when OFFLINE. An addition to the spec"),
  audience: z
    .object({
      viewers: z.number().int(),
      nodes: z.array(z.object({ node: z.string(), role: z.enum(['origin', 'edge']), viewers: z.number().int() })),
    })
    .optional()
    .describe("Scale-out: the stream's WHEP viewers across media nodes, from their registry beats (at most a second old): its own node (origin) and each node relaying it (edge) with its viewers there (an edge's pull is not a viewer), and their sum. Absent when OFFLINE. An addition to the spec"),
  frames_out: z.number().int().optional().describe('Output frames since the publisher session started; absent when OFFLINE. An addition to the spec'),
  outputs: z
    .array(z.object({ name: z.string(), kind: z.string(), watched: z.boolean(), consumers: z.number().int() }))
    .optional()
    .describe('Each output of the stream on its node (whep, hls, rtmp, …): whether someone consumes it and how many (viewers, LL-HLS players of the last 30 s, RTMP pushes, a recording). Present while the node holds the stream, even OFFLINE. An addition to the spec'),
  audio_mappings: z
    .array(z.object({ source: z.string(), feature: z.string(), param: z.string(), feature_value: z.number().nullable(), value: z.number().nullable() }))
    .optional()
    .describe("Each of the params' audio_mappings: its feature on the last frame (smoothed, 0–1) and the value it gave the param; null before any audio. Absent without mappings or when OFFLINE. An addition to the spec"),
  output: z
    .enum(['live', 'slate', 'none'])
    .optional()
    .describe('What the outputs carry: live frames, the slate (publisher away or output stalled; present even when OFFLINE while viewers are held), or none. An addition to the spec'),
  scheduled_updates: z
    .array(ScheduledViewSchema)
    .optional()
    .describe('Changes scheduled over the control WebSocket (at / on_beat), soonest first, until applied. An addition to the spec'),
  orchestrator_info: z.object({ address: z.string(), url: z.string() }),
  inference_status: z.object({
    pipeline: z.string(),
    start_time: z.number().optional(),
    last_params_update_time: z.number().optional(),
    last_params: z.unknown(),
    last_params_hash: z.string(),
    input_fps: z.number(),
    output_fps: z.number(),
    last_input_time: z.number().optional(),
    last_output_time: z.number().optional(),
    restart_count: z.number().int(),
    last_restart_time: z.number().optional(),
    last_restart_logs: z.array(z.string()),
    last_error: z.string(),
    stream_id: z.string(),
  }),
  gateway_status: z.object({
    whep_url: z.string(),
    error: z.object({ error_message: z.string(), error_time: z.number().int() }).optional(),
    ingest_metrics: z.object({
      stats: z.object({
        peer_conn_stats: z.object({ ID: z.string(), BytesReceived: z.number().int(), BytesSent: z.number().int() }),
        conn_quality: z.string(),
        track_stats: z.array(TrackStats),
      }),
    }),
  }),
});

const StatusSchema = z.object({ success: z.literal(true), error: z.null(), data: StatusDataSchema }).meta({ id: 'StreamStatus' });

const PromptResultSchema = z.object({ success: z.boolean(), message: z.string(), was_censored: z.boolean() }).meta({ id: 'PromptSubmissionResult' });

const IdParams = z.object({ id: z.string().min(1).max(100) });

/** An RTMP(S) target. */
export const RtmpUrlSchema = z
  .url({ protocol: /^rtmps?$/, error: 'must be an rtmp:// or rtmps:// URL' })
  .max(2048)
  // URL parsing would quietly percent-encode or strip these; a target with them is a mistake or a trick.
  .regex(/^[^\s\x00-\x1f\x7f]*$/, 'must not contain whitespace or control characters');

export const RtmpOutputsSchema = z
  .array(
    z
      .object({
        name: z
          .string()
          .regex(/^[a-z0-9][a-z0-9_-]{0,31}$/, 'lowercase letters, digits, - and _, 1–32 characters')
          .refine((n) => n !== PRIMARY_RTMP, `${PRIMARY_RTMP} names the stream's own output_rtmp_url`),
        url: RtmpUrlSchema.describe('Must be publicly routable, checked when set and at every connection'),
        enabled: z.boolean().default(true),
        rendition: z
          .string()
          .regex(/^[a-z0-9-]{1,16}$/, 'a rendition name: lowercase letters, digits and -, 1–16 characters')
          .optional()
          .describe("Push one of the stream's smaller renditions (the server's RENDITIONS, e.g. `half`) instead of the full encode"),
      })
      .strict(),
  )
  .max(MAX_RTMP_DESTINATIONS)
  .refine((list) => new Set(list.map((o) => o.name)).size === list.length, 'names must be unique');
const errors = {
  400: EnvelopeErrorSchema,
  401: EnvelopeErrorSchema,
  404: EnvelopeErrorSchema,
  422: EnvelopeErrorSchema,
  429: EnvelopeErrorSchema,
  500: EnvelopeErrorSchema,
  503: EnvelopeErrorSchema,
};

const CreateBody = z
  .object({
    pipeline: z.literal('streamdiffusion').optional().describe('Default streamdiffusion'),
    params: ParamsInputSchema.optional().describe('Defaults fill every field not given'),
    name: z.string().max(200).optional(),
    output_rtmp_url: RtmpUrlSchema.optional().describe('Must be publicly routable (the same address rules as webhook URLs), checked on create and at every connection'),
    outputs: RtmpOutputsSchema.optional().describe(`More RTMP destinations (up to ${MAX_RTMP_DESTINATIONS}), fed from the same encode; change them live with PUT /v1/streams/{id}/outputs`),
    record: z.boolean().optional().describe('Record the output (default false); change it live with PATCH'),
    pipeline_id: z.string().min(1).max(100).optional().describe('Deprecated: pip_SD-turbo, pip_SDXL-turbo, pip_SD15…; use params.model_id'),
    pipeline_params: ParamsInputSchema.optional().describe('Deprecated alias of params'),
  })
  .strict();

const PatchBody = z
  .object({
    pipeline: z.literal('streamdiffusion').optional().describe('Default streamdiffusion'),
    params: ParamsInputSchema.optional().describe('Only the params that change (may be left out when only `record` changes)'),
    record: z.boolean().optional().describe('Start (true) or end (false) recording the output, live'),
  })
  .strict()
  .refine((b) => b.params !== undefined || b.record !== undefined, { message: 'send params, record or both', path: ['params'] });

const PromptBody = z
  .object({
    pipeline: z.literal('live-video-to-video'),
    model_id: z.enum(BETA_MODEL_IDS),
    params: ParamsInputSchema,
  })
  .strict();

/**
 * Tells the caller what the update did (also in the logs): `x-params-update` is the plan the
 * stream's processor ran when it took the update now, `x-params-update-by` says whose plan it is
 * (`node`, or `api` when no processor runs the stream yet).
 */
function updateHeaders(reply: FastifyReply, out: UpdateOutcome): void {
  void reply.header('x-params-update', out.classification.mode);
  void reply.header('x-params-update-by', out.plannedBy);
  if (out.censored) void reply.header('x-prompt-censored', 'true');
}

export function streamRoutes(_config: Readonly<Config>, ctx: AppContext & { control?: StreamControl | undefined }): FastifyPluginAsync {
  return async (app) => {
    const service = ctx.streams;
    if (!service) return;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['streams'];
    const acc = (req: { account: Account | null }) => req.account!;

    r.post(
      '/v1/streams',
      {
        schema: {
          tags,
          summary: 'Create a stream (placed on a media node that has the model)',
          body: CreateBody,
          response: { 201: StreamSchema, ...errors },
        },
      },
      async (req, reply) => {
        const { stream, censored } = await service.create(acc(req), req.body);
        if (censored) void reply.header('x-prompt-censored', 'true');
        reply.code(201);
        return stream;
      },
    );

    r.get(
      '/v1/streams',
      {
        schema: {
          tags,
          summary: "List the account's streams, newest first",
          querystring: z.object({ limit: z.coerce.number().int().min(1).max(100).default(20), cursor: z.string().min(1).max(500).optional() }),
          response: { 200: z.object({ success: z.literal(true), data: z.array(StreamSchema), next_cursor: z.string().nullable() }), ...errors },
        },
      },
      async (req) => ({ success: true as const, ...(await service.list(acc(req), req.query)) }),
    );

    r.get(
      '/v1/playback/:playbackId/output',
      {
        config: { public: true },
        schema: {
          tags,
          summary: "What a stream's outputs carry now, by playback id (no API key: the playback id is the capability, as for watching): live frames, the slate (publisher away), or none",
          params: z.object({ playbackId: z.string().min(1).max(100).regex(/^[A-Za-z0-9_-]+$/) }),
          response: { 200: z.object({ success: z.literal(true), data: z.object({ output: z.enum(['live', 'slate', 'none']) }) }), ...errors },
        },
      },
      async (req) => ({ success: true as const, data: { output: await service.playbackOutput(req.params.playbackId) } }),
    );

    r.get('/v1/streams/:id', { schema: { tags, summary: 'Fetch one stream', params: IdParams, response: { 200: StreamSchema, ...errors } } }, async (req) => service.get(acc(req), req.params.id));

    r.patch(
      '/v1/streams/:id',
      {
        schema: {
          tags,
          summary: 'Update params; hot ones apply on the next frame, others reload the pipeline. 300 a minute per account',
          params: IdParams,
          body: PatchBody,
          response: { 200: StreamSchema, ...errors },
        },
        // Counted for the caller's own streams (404 first otherwise), before the body is validated:
        // invalid requests spend the budget too.
        preValidation: async (req) => {
          if (req.account) await service.checkUpdateRate(req.account, (req.params as { id: string }).id, 'patch');
        },
      },
      async (req, reply) => {
        const out = await service.update(acc(req), req.params.id, req.body.params ?? {}, { record: req.body.record });
        updateHeaders(reply, out);
        return out.stream;
      },
    );

    r.post(
      '/beta/streams/:id/prompts',
      {
        schema: {
          tags,
          summary: 'Deprecated: submit prompt and params (prefer PATCH /v1/streams/{id})',
          params: IdParams,
          body: PromptBody,
          response: { 200: PromptResultSchema, ...errors },
        },
        preValidation: async (req) => {
          if (req.account) await service.checkUpdateRate(req.account, (req.params as { id: string }).id, 'prompts');
        },
      },
      async (req, reply) => {
        const out = await service.submitPrompt(acc(req), req.params.id, req.body.model_id, req.body.params);
        updateHeaders(reply, out);
        const what = out.classification.mode === 'reload' ? 'Params updated; the pipeline is reloading' : out.classification.mode === 'hot' ? 'Params updated' : 'Nothing changed';
        return { success: out.nodeError === null, message: out.nodeError ?? what, was_censored: out.censored };
      },
    );

    r.get(
      '/v1/streams/:id/status',
      { schema: { tags, summary: 'Live status of the stream pipeline (OFFLINE after teardown)', params: IdParams, response: { 200: StatusSchema, ...errors } } },
      async (req) => {
        const data = await service.status(acc(req), req.params.id, { recentlyDeleted: true });
        const scheduled = ctx.control?.scheduled(req.params.id) ?? [];
        return { success: true as const, error: null, data: scheduled.length > 0 ? { ...data, scheduled_updates: scheduled } : data };
      },
    );

    const deleted = { 200: z.object({ success: z.literal(true), data: z.object({}).strict() }), ...errors };
    r.delete(
      '/v1/streams',
      { schema: { tags, summary: 'End and delete a stream (Daydream style: ?id=)', querystring: z.object({ id: z.string().min(1).max(100) }), response: deleted } },
      async (req) => {
        await service.delete(acc(req), req.query.id);
        await ctx.clips?.deleteAll(req.query.id);
        await ctx.recordings?.deleteAll(req.query.id);
        await ctx.slates?.deleteAll(req.query.id);
        return { success: true as const, data: {} };
      },
    );
    r.delete('/v1/streams/:id', { schema: { tags, summary: 'End and delete a stream', params: IdParams, response: deleted } }, async (req) => {
      await service.delete(acc(req), req.params.id);
      await ctx.clips?.deleteAll(req.params.id);
      await ctx.recordings?.deleteAll(req.params.id);
      await ctx.slates?.deleteAll(req.params.id);
      return { success: true as const, data: {} };
    });
  };
}

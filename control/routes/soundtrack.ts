/**
 * A stream's soundtrack (Area B error shape): one take of one of the account's rendered songs,
 * mixed into the stream's output audio for every output (WHEP, LL-HLS, recordings, clips, RTMP),
 * alone or over the publisher's audio, which it ducks. Set, read with where it plays, cleared.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Account } from '../../store/index.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { EnvelopeErrorSchema } from './streams.ts';

const SoundtrackBody = z
  .object({
    song_id: z.string().min(1).max(100).describe("One of the account's songs, rendered (status done)"),
    take: z.union([z.literal(1), z.literal(2)]).default(1).describe('Which take of the song (2 exists when it was made with variations: 2)'),
    start: z
      .union([z.literal('now'), z.number().int().positive()])
      .default('now')
      .describe("`now`, or when the take's first sample plays, ms since the epoch (within 24 h of now; a past time joins the song where it is by then)"),
    loop: z.boolean().default(false).describe('Play the take again from its first sample after its last, with no gap'),
    gain_db: z.number().min(-60).max(12).default(0).describe('Gain of the song, dB'),
    duck_publisher_db: z.number().min(-60).max(0).default(0).describe("Gain of the publisher's audio while the song sounds, dB (0: no ducking)"),
  })
  .strict();

const SoundtrackSchema = z
  .object({
    song_id: z.string(),
    take: z.union([z.literal(1), z.literal(2)]),
    start_at: z.number().describe("ms since the epoch of the take's first sample"),
    loop: z.boolean(),
    gain_db: z.number(),
    duck_publisher_db: z.number(),
    state: z.enum(['idle', 'waiting', 'playing', 'ended']).describe('idle: no publisher right now (it plays with the next); waiting: start_at is ahead; ended: played to its end (no loop)'),
    position_s: z.number().nullable().describe("Where the output is in the take, s (null while idle)"),
    duration_s: z.number(),
    loops: z.number().int().describe('Passes through the take completed'),
  })
  .meta({ id: 'Soundtrack' });
const IdParams = z.object({ id: z.string().min(1).max(100) });
const errors = { 400: EnvelopeErrorSchema, 401: EnvelopeErrorSchema, 404: EnvelopeErrorSchema, 409: EnvelopeErrorSchema, 503: EnvelopeErrorSchema };

export function soundtrackRoutes(_config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const soundtracks = ctx.soundtracks;
    if (!soundtracks) return;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['streams'];
    const acc = (req: { account: Account | null }) => req.account!;
    r.get(
      '/v1/streams/:id/soundtrack',
      {
        schema: {
          tags,
          summary: "The stream's soundtrack and where it plays (data null: none)",
          params: IdParams,
          response: { 200: z.object({ success: z.literal(true), data: SoundtrackSchema.nullable() }), ...errors },
        },
      },
      async (req) => ({ success: true as const, data: await soundtracks.get(acc(req), req.params.id) }),
    );
    r.put(
      '/v1/streams/:id/soundtrack',
      {
        schema: {
          tags,
          summary: "Mix a take of one of the account's songs into the stream's output audio (every output), live",
          params: IdParams,
          body: SoundtrackBody,
          response: { 200: z.object({ success: z.literal(true), data: SoundtrackSchema }), ...errors },
        },
      },
      async (req) => ({ success: true as const, data: await soundtracks.set(acc(req), req.params.id, req.body) }),
    );
    r.delete(
      '/v1/streams/:id/soundtrack',
      {
        schema: {
          tags,
          summary: "Stop the soundtrack: the output audio is the publisher's alone again (idempotent)",
          params: IdParams,
          response: { 200: z.object({ success: z.literal(true), data: z.object({}).strict() }), ...errors },
        },
      },
      async (req) => {
        await soundtracks.clear(acc(req), req.params.id);
        return { success: true as const, data: {} };
      },
    );
  };
}

/**
 * Area A routes (spec "Area A: song generation"), mounted under MUSIC_BASE_PATH (default /music/v1).
 * Failures use the Area A Error record; see control/errors.ts for the codes.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { SongRecord } from '../../store/index.ts';
import type { AppContext } from '../buildApp.ts';
import type { Config } from '../config.ts';
import { musicError } from '../errors.ts';

export const MusicErrorSchema = z
  .object({ error: z.string().describe('A code to branch on'), message: z.string().describe('What went wrong, in plain words') })
  .meta({ id: 'MusicError' });
const QuotaErrorSchema = MusicErrorSchema.extend({ limit: z.number().int(), used: z.number().int(), plan: z.string(), upgrade_url: z.url() }).meta({ id: 'MusicQuotaError' });

const TakeSchema = z
  .object({
    n: z.number().int().min(1).max(2),
    seed: z.number().int(),
    duration: z.number(),
    waveform: z.array(z.number().min(0).max(1)).length(200),
    mp3_url: z.url(),
    wav_url: z.url(),
  })
  .meta({ id: 'Take' });

export const SongSchema = z
  .object({
    id: z.string().regex(/^sng_/),
    status: z.enum(['queued', 'rendering', 'done', 'failed']),
    position: z.number().int().min(1).nullable(),
    progress: z.number().min(0).max(1).describe('Render progress while rendering (0–1); an addition to the spec'),
    prompt: z.string(),
    duration: z.number(),
    bpm: z.number().int(),
    key: z.string().nullable(),
    loop: z.boolean(),
    seed: z.number().int(),
    variations: z.union([z.literal(1), z.literal(2)]),
    created_at: z.iso.datetime(),
    finished_at: z.iso.datetime().nullable(),
    error: MusicErrorSchema.nullable(),
    takes: z.array(TakeSchema),
  })
  .meta({ id: 'Song' });

const KEY_NAME = /^\s*[A-Ga-g]\s*(#|b|♯|♭|sharp|flat)?\s+(major|minor|maj|min)\s*$/i;

export const SongCreateSchema = z
  .object({
    prompt: z.string().trim().min(1, 'must be 1 to 400 characters').max(400, 'must be 1 to 400 characters'),
    duration: z.number().min(10, 'must be 10 to 120 seconds').max(120, 'must be 10 to 120 seconds').optional(),
    bpm: z.number().int('must be an integer').min(60, 'must be 60 to 200').max(200, 'must be 60 to 200').optional(),
    key: z.string().regex(KEY_NAME, 'must be one of the 24 keys, written "<tonic> major" or "<tonic> minor"').optional(),
    loop: z.boolean().optional(),
    seed: z.number().int('must be an integer').min(0, 'must be 0 to 2147483647').max(2147483647, 'must be 0 to 2147483647').optional(),
    variations: z.union([z.literal(1), z.literal(2)], { error: 'must be 1 or 2' }).optional(),
  })
  .strict()
  .meta({ id: 'SongCreate' });

const UsageSchema = z
  .object({
    plan: z.enum(['anonymous', 'free', 'songs', 'pro', 'max', 'internal']),
    limit: z.number().int().nullable(),
    used: z.number().int(),
    resets_at: z.iso.datetime(),
  })
  .meta({ id: 'Usage' });

// Any take number parses, so `3.mp3` is a clear 404 (no such file) rather than a 400.
const FILE = /^(\d{1,3})\.(mp3|wav)$/;
const MIME = { mp3: 'audio/mpeg', wav: 'audio/wav' } as const;

export function musicRoutes(config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>();
    const base = `${config.publicUrl}${config.musicBasePath}`;
    const songs = ctx.songs;
    const tags = ['songs'];

    const takeUrl = (id: string, n: number, ext: 'mp3' | 'wav') => `${base}/songs/${id}/${n}.${ext}`;
    const view = async (s: SongRecord): Promise<z.infer<typeof SongSchema>> => ({
      id: s.id,
      status: s.status,
      position: songs && s.status === 'queued' ? await songs.position(s) : null,
      progress: s.status === 'done' ? 1 : s.progress,
      prompt: s.prompt,
      duration: s.duration,
      bpm: s.bpm,
      key: s.key,
      loop: s.loop,
      seed: s.seed,
      variations: s.variations,
      created_at: s.createdAt,
      finished_at: s.finishedAt,
      error: s.error,
      takes:
        s.status === 'done'
          ? s.takes.map((t) => ({ n: t.n, seed: t.seed, duration: t.duration, waveform: t.waveform, mp3_url: takeUrl(s.id, t.n, 'mp3'), wav_url: takeUrl(s.id, t.n, 'wav') }))
          : [],
    });

    r.get(
      '/usage',
      { schema: { operationId: 'getUsage', tags, response: { 200: UsageSchema, 401: MusicErrorSchema } } },
      async (req) => {
        if (!songs) throw musicError('generator_unavailable');
        return songs.usage(req.account!);
      },
    );

    if (!songs) return;

    r.post(
      '/songs',
      {
        schema: {
          operationId: 'createSong',
          tags,
          body: SongCreateSchema,
          response: { 202: SongSchema, 400: MusicErrorSchema, 401: MusicErrorSchema, 402: QuotaErrorSchema, 422: MusicErrorSchema, 429: MusicErrorSchema, 503: MusicErrorSchema },
        },
      },
      async (req, reply) => {
        let outcome;
        try {
          outcome = await songs.create(req.account!, req.body);
        } catch (err) {
          const artist = (err as { artist?: unknown }).artist;
          if (typeof artist === 'string') {
            throw musicError('prompt_refused', `The prompt was refused because it names an artist: ${artist}. Describe the sound instead (genre, mood, instruments, tempo).`);
          }
          throw err;
        }
        if (!outcome.ok) {
          if (outcome.reason === 'quota') {
            throw musicError('quota_exceeded', `This month's ${outcome.limit} songs are used up; the count resets on the 1st (UTC).`, {
              extra: { limit: outcome.limit, used: outcome.used, plan: outcome.plan, upgrade_url: `${config.publicUrl}/upgrade` },
            });
          }
          if (outcome.reason === 'busy') throw musicError('too_many_active', `You already have ${outcome.active} songs in line or rendering; at most 3 at once.`, { headers: { 'retry-after': '10' } });
          throw musicError('generator_unavailable', undefined, { headers: { 'retry-after': '5' } });
        }
        reply.code(202);
        return { ...(await view(outcome.song)), position: outcome.position };
      },
    );

    r.get(
      '/songs',
      {
        schema: {
          operationId: 'listSongs',
          tags,
          querystring: z.object({
            limit: z.coerce.number().int('must be an integer').min(1, 'must be 1 to 100').max(100, 'must be 1 to 100').default(20),
            cursor: z.string().min(1).max(500).optional(),
          }),
          response: { 200: z.object({ songs: z.array(SongSchema), next_cursor: z.string().nullable() }), 400: MusicErrorSchema, 401: MusicErrorSchema },
        },
      },
      async (req) => {
        let page;
        try {
          page = await songs.list(req.account!, req.query.limit, req.query.cursor ?? null);
        } catch (err) {
          if ((err as { code?: string }).code === 'invalid_cursor') throw musicError('invalid_request', 'cursor: not a cursor this API returned');
          throw err;
        }
        return { songs: await Promise.all(page.items.map(view)), next_cursor: page.nextCursor };
      },
    );

    r.get(
      '/songs/:id',
      {
        schema: {
          operationId: 'getSong',
          tags,
          params: z.object({ id: z.string().min(1).max(100) }),
          response: { 200: SongSchema, 401: MusicErrorSchema, 404: MusicErrorSchema },
        },
      },
      async (req) => {
        const song = await songs.get(req.account!, req.params.id);
        if (!song) throw musicError('not_found');
        return view(song);
      },
    );

    /** Stable take URL → 302 to a short-lived signed link (spec getSongMp3 / getSongWav). */
    r.get(
      '/songs/:id/:file',
      {
        config: { public: true },
        schema: {
          operationId: 'getSongFile',
          summary: 'GET /songs/{id}/{n}.mp3 and /songs/{id}/{n}.wav: 302 to a short-lived signed link',
          tags,
          security: [],
          params: z.object({ id: z.string().min(1).max(100), file: z.string().regex(FILE, 'must be <n>.mp3 or <n>.wav') }),
          response: { 302: z.null().describe('Redirect to the file'), 404: MusicErrorSchema },
        },
      },
      async (req, reply) => {
        const [, n, ext] = FILE.exec(req.params.file) as RegExpExecArray;
        const song = await ctx.store.songs.get(req.params.id);
        const take = song?.status === 'done' ? song.takes.find((t) => t.n === Number(n)) : undefined;
        if (!take) throw musicError('file_not_found');
        return reply.redirect(`${base}${ctx.links!.sign(`/files/songs/${req.params.id}/${n}.${ext}`)}`, 302);
      },
    );

    r.get(
      '/files/songs/:id/:file',
      {
        config: { public: true },
        schema: {
          hide: true,
          params: z.object({ id: z.string().min(1).max(100), file: z.string().regex(FILE) }),
          querystring: z.object({ expires: z.coerce.number().int(), signature: z.string().min(1).max(200) }),
        },
      },
      async (req, reply) => {
        const path = `/files/songs/${req.params.id}/${req.params.file}`;
        if (!ctx.links!.verify(path, req.query.expires, req.query.signature)) throw musicError('link_expired');
        const [, n, ext] = FILE.exec(req.params.file) as RegExpExecArray;
        const song = await ctx.store.songs.get(req.params.id);
        const take = song?.takes.find((t) => t.n === Number(n));
        if (!take) throw musicError('file_not_found');
        const file = ctx.blobs!.pathOf(ext === 'mp3' ? take.mp3Key : take.wavKey);
        const info = await stat(file).catch(() => null);
        if (!info) throw musicError('file_not_found');
        return reply
          .type(MIME[ext as 'mp3' | 'wav'])
          .header('content-length', String(info.size))
          .header('cache-control', 'private, max-age=600')
          .header('content-disposition', `attachment; filename="${req.params.id}-${n}.${ext}"`)
          .send(createReadStream(file));
      },
    );
  };
}

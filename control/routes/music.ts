/**
 * Area A routes (spec "Area A: song generation"), mounted under MUSIC_BASE_PATH (default /music/v1).
 * Failures use the Area A Error record; see errors/index.ts for the codes.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { SongRecord, StemName, TakeRecord } from '../../store/index.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { musicError } from '../../errors/index.ts';
import { PlanInputError, partialMp3Key } from '../../songs/index.ts';
import { sendByteRange, type ByteRange } from '../ByteRange.ts';
import { growingFileStream } from '../GrowingFileStream.ts';

export const MusicErrorSchema = z
  .object({ error: z.string().describe('A code to branch on'), message: z.string().describe('What went wrong, in plain words') })
  .meta({ id: 'MusicError' });
const QuotaErrorSchema = MusicErrorSchema.extend({ limit: z.number().int(), used: z.number().int(), plan: z.string(), upgrade_url: z.url() }).meta({ id: 'MusicQuotaError' });

const STEM_NAMES = ['drums', 'bass', 'chords', 'lead', 'effects'] as const satisfies readonly StemName[];

const StemUrlsSchema = z
  .object({
    drums: z.url().describe('Drums and percussion'),
    bass: z.url().describe('Bass'),
    chords: z.url().describe('Chords and pads'),
    lead: z.url().describe('Lead and arpeggio'),
    effects: z.url().describe('Reverb and delay returns of every part'),
  })
  .describe('Stem WAVs (16-bit stereo 48 kHz), mastered so that their sample-wise sum is the take\'s WAV. Stable links, no auth')
  .meta({ id: 'TakeStems' });

const TakeSchema = z
  .object({
    n: z.number().int().min(1).max(2),
    seed: z.number().int(),
    duration: z.number(),
    waveform: z.array(z.number().min(0).max(1)).length(200),
    mp3_url: z.url(),
    wav_url: z.url(),
    midi_url: z.url().nullable().describe('Standard MIDI File: one track per instrument, tempo and key signature; the notes rendered. An addition to the spec'),
    stems: StemUrlsSchema.nullable().describe('Null unless the song was created with stems: true. An addition to the spec'),
    stems_zip_url: z.url().nullable().describe('The five stems in one zip; null unless stems: true. An addition to the spec'),
  })
  .meta({ id: 'Take' });

const SECTION_NAMES = ['intro', 'verse', 'chorus', 'bridge', 'build', 'drop', 'break', 'outro'] as const;

const SectionSchema = z
  .object({
    name: z.string().describe('intro, verse, chorus, bridge, build, drop, break or outro (loop: the single part of a planned loop)'),
    start_bar: z.number().int().min(0).describe('First bar, 0-based'),
    bars: z.number().int().min(1),
    energy: z.number().min(0).max(1),
    style: z.string().describe('Extra style words of this section; empty when none'),
  })
  .meta({ id: 'SongSection' });

const SectionRequestSchema = z
  .object({
    name: z.enum(SECTION_NAMES, { error: `must be one of ${SECTION_NAMES.join(', ')}` }),
    bars: z.number().int('must be an integer').min(1, 'must be 1 to 64').max(64, 'must be 1 to 64'),
    energy: z.number().min(0, 'must be 0 to 1').max(1, 'must be 0 to 1'),
    style: z.string().trim().max(100, 'must be at most 100 characters').optional(),
  })
  .strict()
  .meta({ id: 'SongSectionRequest' });

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
    stems: z.boolean().describe('Whether stems were asked for. An addition to the spec'),
    sections: z.array(SectionSchema).describe('The section plan used: as asked, or as the engine planned it. An addition to the spec'),
    streaming_mp3_urls: z
      .array(z.url())
      .describe('While rendering: MP3 URLs of takes that can already be fetched and played (the bytes arrive as they are encoded; the download ends as the finished file). Empty otherwise. An addition to the spec'),
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
    stems: z.boolean().optional().describe('Also render stems (drums, bass, chords, lead, effects) for every take. Default false. An addition to the spec'),
    sections: z
      .array(SectionRequestSchema)
      .min(1, 'must hold 1 to 32 sections')
      .max(32, 'must hold 1 to 32 sections')
      .optional()
      .describe('A section plan to follow; the bars set the length (10–120 s at the tempo), so not with duration. An addition to the spec'),
  })
  .strict()
  .meta({ id: 'SongCreate' });

export const UsageSchema = z
  .object({
    plan: z.enum(['anonymous', 'free', 'songs', 'pro', 'max', 'internal']),
    limit: z.number().int().nullable(),
    used: z.number().int(),
    resets_at: z.iso.datetime(),
  })
  .meta({ id: 'Usage' });

/** Signed file names: `<n>.mp3`, `<n>.wav`, `<n>.mid`, `<n>.stems.zip`, `<n>.<stem>.wav`. */
const SIGNED_FILE = /^([12])\.(mp3|wav|mid|stems\.zip|(?:drums|bass|chords|lead|effects)\.wav)$/;
const MIME: Record<string, string> = { mp3: 'audio/mpeg', wav: 'audio/wav', mid: 'audio/midi', zip: 'application/zip' };

/** Path parameters of the take downloads; bad values answer 404 (downloads are 302 or 404 only). */
const TakeParams = z.object({ id: z.string().min(1).max(100), n: z.coerce.number().int().min(1).max(2).describe('Take number, 1 or 2') });

export function musicRoutes(config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const r = app.withTypeProvider<ZodTypeProvider>();
    const base = `${config.publicUrl}${config.musicBasePath}`;
    const songs = ctx.songs;
    const tags = ['songs'];

    const takeUrl = (id: string, n: number, ext: string) => `${base}/songs/${id}/${n}.${ext}`;
    const takeView = (s: SongRecord, t: TakeRecord) => ({
      n: t.n,
      seed: t.seed,
      duration: t.duration,
      waveform: t.waveform,
      mp3_url: takeUrl(s.id, t.n, 'mp3'),
      wav_url: takeUrl(s.id, t.n, 'wav'),
      midi_url: t.midiKey ? takeUrl(s.id, t.n, 'mid') : null,
      stems: t.stems ? (Object.fromEntries(STEM_NAMES.map((k) => [k, `${base}/songs/${s.id}/${t.n}/stems/${k}.wav`])) as Record<StemName, string>) : null,
      stems_zip_url: t.stems ? `${base}/songs/${s.id}/${t.n}/stems.zip` : null,
    });
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
      takes: s.status === 'done' ? s.takes.map((t) => takeView(s, t)) : [],
      stems: s.stems ?? false,
      sections: s.sections ?? [],
      streaming_mp3_urls: s.status === 'rendering' ? (s.streaming ?? []).map((n) => takeUrl(s.id, n, 'mp3')) : [],
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
          if (err instanceof PlanInputError) throw musicError('invalid_request', err.message, { cause: err });
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
          if ((err as { code?: string }).code === 'invalid_cursor') throw musicError('invalid_request', 'cursor: not a cursor this API returned', { cause: err });
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

    /**
     * Stable take URLs → 302 to a short-lived signed link (spec getSongMp3 / getSongWav, and our
     * MIDI and stem downloads). Any bad id, take number or file name is 404: downloads answer 302
     * or 404 only, so validation failures are attached and answered as "no such file".
     */
    const download = (
      url: string,
      operationId: string,
      summary: string,
      params: z.ZodObject,
      pick: (take: TakeRecord, p: Record<string, unknown>) => string | null,
    ) =>
      r.get(
        url,
        {
          config: { public: true },
          attachValidation: true,
          schema: { operationId, summary, tags, security: [], params, response: { 302: z.null().describe('Redirect to the file'), 404: MusicErrorSchema } },
        },
        async (req, reply) => {
          if (req.validationError) throw musicError('file_not_found');
          const p = req.params as Record<string, unknown> & { id: string; n: number };
          const song = await ctx.store.songs.get(p.id);
          const take = song?.status === 'done' ? song.takes.find((t) => t.n === Number(p.n)) : undefined;
          let file = take ? pick(take, p) : null;
          // Progressive: a take's MP3 can be fetched once its encoding has begun.
          if (!file && operationId === 'getSongMp3' && song?.status === 'rendering' && song.streaming?.includes(Number(p.n))) file = `${p.n}.mp3`;
          if (!file) throw musicError('file_not_found');
          return reply.redirect(`${base}${ctx.links!.sign(`/files/songs/${p.id}/${file}`)}`, 302);
        },
      );
    download('/songs/:id/:n.mp3', 'getSongMp3', 'The take\'s MP3 (192 kbps CBR stereo 48 kHz): 302 to a short-lived signed link', TakeParams, (t) => `${t.n}.mp3`);
    download('/songs/:id/:n.wav', 'getSongWav', 'The take\'s WAV (16-bit stereo 48 kHz): 302 to a short-lived signed link', TakeParams, (t) => `${t.n}.wav`);
    download('/songs/:id/:n.mid', 'getSongMidi', 'The take\'s Standard MIDI File: 302 to a short-lived signed link', TakeParams, (t) => (t.midiKey ? `${t.n}.mid` : null));
    download('/songs/:id/:n/stems.zip', 'getSongStemsZip', 'The take\'s five stems in one zip: 302 to a short-lived signed link', TakeParams, (t) => (t.stems ? `${t.n}.stems.zip` : null));
    download(
      '/songs/:id/:n/stems/:stem.wav',
      'getSongStem',
      'One stem WAV of the take: 302 to a short-lived signed link',
      TakeParams.extend({ stem: z.enum(STEM_NAMES) }),
      (t, p) => (t.stems ? `${t.n}.${String(p.stem)}.wav` : null),
    );
    // Any other file name under a song (`1.ogg`, `3.mp3`, `x.wav`) is no such file, not a bad request.
    r.get('/songs/:id/:file', { config: { public: true }, schema: { hide: true } }, async () => {
      throw musicError('file_not_found');
    });

    r.get(
      '/files/songs/:id/:file',
      {
        config: { public: true },
        schema: {
          hide: true,
          params: z.object({ id: z.string().min(1).max(100), file: z.string().regex(SIGNED_FILE) }),
          querystring: z.object({ expires: z.coerce.number().int(), signature: z.string().min(1).max(200) }),
        },
      },
      async (req, reply) => {
        const path = `/files/songs/${req.params.id}/${req.params.file}`;
        if (!ctx.links!.verify(path, req.query.expires, req.query.signature)) throw musicError('link_expired');
        const [, n, what] = SIGNED_FILE.exec(req.params.file) as RegExpExecArray;
        const song = await ctx.store.songs.get(req.params.id);
        const take = song?.takes.find((t) => t.n === Number(n));
        if (!take && what === 'mp3' && song?.status === 'rendering' && song.streaming?.includes(Number(n))) {
          // Still encoding: follow the partial file until the final MP3 is published and fully sent.
          // Its length is unknown until then, so `Range` is ignored (200 from the first byte) and
          // `Accept-Ranges: none` tells players not to seek; the finished take's link serves ranges.
          const id = req.params.id;
          const finalKey = `songs/${id}/${n}.mp3`;
          const body = growingFileStream({
            path: ctx.blobs!.pathOf(partialMp3Key(id, Number(n))),
            isComplete: async (sent) => {
              const done = await ctx.blobs!.stat(finalKey);
              if (done) return sent >= done.size;
              const now = await ctx.store.songs.get(id);
              if (!now || now.status === 'failed') throw new Error(`render failed while streaming [songId:${id}]`);
              return false;
            },
          });
          return reply
            .type('audio/mpeg')
            .header('cache-control', 'no-store')
            .header('accept-ranges', 'none')
            .header('content-disposition', `attachment; filename="${id}-${n}.mp3"`)
            .send(body);
        }
        if (!take) throw musicError('file_not_found');
        let key: string | undefined;
        /** Where the file lies in its blob: all of it, or one stem's member of the stems zip. */
        let within: ByteRange | undefined;
        let ext: string;
        if (what === 'mp3' || what === 'wav' || what === 'mid') {
          key = what === 'mp3' ? take.mp3Key : what === 'wav' ? take.wavKey : take.midiKey;
          ext = what;
        } else if (what === 'stems.zip') {
          key = take.stems?.zipKey;
          ext = 'zip';
        } else {
          // One stem: its bytes lie uncompressed inside the zip.
          const member = take.stems?.members[(what as string).slice(0, -4) as StemName];
          key = take.stems?.zipKey;
          if (member) within = { start: member.offset, end: member.offset + member.size - 1 };
          ext = 'wav';
          if (!member) key = undefined;
        }
        if (!key) throw musicError('file_not_found');
        const info = await ctx.blobs!.stat(key);
        if (!info) throw musicError('file_not_found');
        const name = what === 'stems.zip' ? `${req.params.id}-${n}-stems.zip` : `${req.params.id}-${n}.${what}`;
        const blobKey = key;
        const offset = within?.start ?? 0;
        return sendByteRange(req, reply, {
          size: within ? within.end - within.start + 1 : info.size,
          headers: { 'content-type': MIME[ext] as string, 'cache-control': 'private, max-age=600', 'content-disposition': `attachment; filename="${name}"` },
          // A range of a stem is that range of its member, counted from the member's first byte.
          open: (range) => ctx.blobs!.createReadStream(blobKey, range ? { start: offset + range.start, end: offset + range.end } : within),
          refuse: (message, headers) => musicError('range_not_satisfiable', message, { headers }),
        });
      },
    );
  };
}

/**
 * Clip routes (Area B error shape): make a clip of the last N seconds of a live stream, list,
 * fetch and delete a stream's clips, and download one. The stable MP4 URL needs the API key and
 * answers 302 to a short-lived signed link (as song downloads do), which a `<video>` element or
 * a share link can then fetch without one; the signed file route serves byte ranges for seeking.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { CLIP_MAX_SECONDS } from '../../media/index.ts';
import type { Account } from '../../store/index.ts';
import type { AppContext } from '../Services.ts';
import { CLIPS_PER_MINUTE, ClipService } from '../../streams/index.ts';
import type { Config } from '../config.ts';
import { streamError } from '../../errors/index.ts';
import { EnvelopeErrorSchema } from './streams.ts';
import { sendByteRange } from '../ByteRange.ts';

export const ClipSchema = z
  .object({
    id: z.string().regex(/^clp_/),
    stream_id: z.string(),
    seconds: z.number().int().describe('What was asked'),
    duration: z.number().describe('Seconds of media in the MP4: whole segments cut at keyframes: at least `seconds` and up to one segment (≈ 1 s) more, or less when less was live'),
    size: z.number().int().describe('Bytes'),
    started_at: z.string().describe('Time of the first frame'),
    created_at: z.string(),
    mp4_url: z.url().describe('Needs the API key; answers 302 to a signed link valid for 10 minutes'),
  })
  .meta({ id: 'Clip' });

/** A clip as the key-less viewer page sees it: no stream id, a signed link instead of the stable URL. */
const PublicClipSchema = z
  .object({
    id: z.string().regex(/^clp_/),
    duration: z.number().describe('Seconds of media'),
    started_at: z.string(),
    created_at: z.string(),
    url: z.string().describe('Signed link to the MP4 (path and query on this origin), valid for 10 minutes'),
  })
  .meta({ id: 'PublicClip' });

const StreamParams = z.object({ id: z.string().min(1).max(100) });
const ClipParams = StreamParams.extend({ clipId: z.string().min(1).max(100) });
const errors = { 400: EnvelopeErrorSchema, 401: EnvelopeErrorSchema, 404: EnvelopeErrorSchema, 409: EnvelopeErrorSchema, 429: EnvelopeErrorSchema, 503: EnvelopeErrorSchema };
const SIGNED = /^(clp_[A-Za-z0-9_-]{1,64})\.mp4$/;

export function clipRoutes(_config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const clips = ctx.clips;
    if (!clips || !ctx.links || !ctx.blobs) return;
    const links = ctx.links;
    const blobs = ctx.blobs;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['clips'];
    const acc = (req: { account: Account | null }) => req.account!;

    r.post(
      '/v1/streams/:id/clips',
      {
        schema: {
          tags,
          summary: `Clip the last N seconds (1–${CLIP_MAX_SECONDS}) of the live output; the MP4 is ready when this answers. ${CLIPS_PER_MINUTE} a minute per stream`,
          params: StreamParams,
          body: z.object({ seconds: z.number().int().min(1).max(CLIP_MAX_SECONDS).describe('Seconds to clip, counted back from the newest output') }).strict(),
          response: { 201: ClipSchema, ...errors },
        },
      },
      async (req, reply) => {
        const clip = await clips.create(acc(req), req.params.id, req.body.seconds);
        reply.code(201);
        return clip;
      },
    );

    r.get(
      '/v1/streams/:id/clips',
      { schema: { tags, summary: "The stream's clips, newest first", params: StreamParams, response: { 200: z.object({ success: z.literal(true), data: z.array(ClipSchema) }), ...errors } } },
      async (req) => ({ success: true as const, data: await clips.list(acc(req), req.params.id) }),
    );

    r.get(
      '/v1/playback/:playbackId/clips',
      {
        config: { public: true },
        schema: {
          tags,
          summary: "A stream's clips by its playback id, newest first, each with a signed MP4 link valid for 10 minutes (no API key: the playback id is the capability, as for watching)",
          params: z.object({ playbackId: z.string().min(1).max(100).regex(/^[A-Za-z0-9_-]+$/) }),
          response: { 200: z.object({ success: z.literal(true), data: z.array(PublicClipSchema) }), ...errors },
        },
      },
      async (req) => ({
        success: true as const,
        data: (await clips.listByPlayback(req.params.playbackId)).map((c) => ({
          id: c.id,
          duration: c.durationMs / 1000,
          started_at: c.startedAt,
          created_at: c.createdAt,
          url: links.sign(`/files/clips/${c.streamId}/${c.id}.mp4`),
        })),
      }),
    );

    r.get(
      '/v1/streams/:id/clips/:clipId',
      { schema: { tags, summary: 'One clip', params: ClipParams, response: { 200: ClipSchema, ...errors } } },
      async (req) => clips.get(acc(req), req.params.id, req.params.clipId),
    );

    r.delete(
      '/v1/streams/:id/clips/:clipId',
      { schema: { tags, summary: 'Delete a clip', params: ClipParams, response: { 200: z.object({ success: z.literal(true), data: z.object({}).strict() }), ...errors } } },
      async (req) => {
        await clips.delete(acc(req), req.params.id, req.params.clipId);
        return { success: true as const, data: {} };
      },
    );

    r.get(
      '/v1/streams/:id/clips/:clipId.mp4',
      { schema: { tags, summary: "The clip's MP4: 302 to a signed link valid for 10 minutes", params: ClipParams, response: { 302: z.null().describe('Redirect to the file'), ...errors } } },
      async (req, reply) => {
        const rec = await clips.record(acc(req), req.params.id, req.params.clipId);
        return reply.redirect(links.sign(`/files/clips/${rec.streamId}/${rec.id}.mp4`), 302);
      },
    );

    r.get(
      '/files/clips/:id/:file',
      {
        config: { public: true },
        schema: {
          hide: true,
          params: z.object({ id: z.string().min(1).max(100), file: z.string().regex(SIGNED) }),
          querystring: z.object({ expires: z.coerce.number().int(), signature: z.string().min(1).max(200) }),
        },
      },
      async (req, reply) => {
        const path = `/files/clips/${req.params.id}/${req.params.file}`;
        if (!links.verify(path, req.query.expires, req.query.signature)) throw streamError('CLIPS/LINK_EXPIRED');
        const clipId = (SIGNED.exec(req.params.file) as RegExpExecArray)[1] as string;
        const key = ClipService.mp4Key(req.params.id, clipId);
        const info = await blobs.stat(key);
        if (!info) throw streamError('CLIPS/NOT_FOUND', undefined, { details: { id: clipId } });
        return sendByteRange(req, reply, {
          size: info.size,
          headers: { 'content-type': 'video/mp4', 'cache-control': 'private, max-age=600', 'content-disposition': `inline; filename="${clipId}.mp4"` },
          open: (range) => blobs.createReadStream(key, range ?? undefined),
          refuse: (message, headers) => streamError('REQUEST/RANGE_NOT_SATISFIABLE', message, { headers }),
        });
      },
    );
  };
}

/**
 * Recording routes (Area B error shape): list a stream's recordings, get and delete one, and
 * play or download it. The stable `.m3u8` and `.mp4` URLs need the API key and answer 302 to
 * signed links (the songs' and clips' scheme): the playlist's own segment and init URIs are
 * signed links too (valid PLAYLIST_LINK_TTL_S), so hls.js or a `<video>` element plays it with
 * no key; the MP4 route serves byte ranges for seeking.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { RECORDING_ID } from '../../media/index.ts';
import type { Account } from '../../store/index.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { streamError } from '../../errors/index.ts';
import { PLAYLIST_LINK_TTL_S } from '../../streams/index.ts';
import { sendByteRange } from '../ByteRange.ts';
import { EnvelopeErrorSchema } from './streams.ts';

export const RecordingSchema = z
  .object({
    id: z.string().regex(/^rec_/),
    stream_id: z.string(),
    state: z.enum(['recording', 'complete', 'interrupted']).describe('interrupted: its media node stopped without ending it; it plays up to its last complete segment'),
    started_at: z.string().describe('Time of its first frame still kept'),
    ended_at: z.string().nullable().describe('null while recording'),
    duration: z.number().describe("Seconds of the publisher's media (the time it was away, and the slate watched outputs carried meanwhile, are not in it)"),
    size: z.number().int().describe('Bytes kept'),
    segments: z.number().int(),
    discontinuities: z.number().int().describe('Times the publisher left and came back within it'),
    mp4_url: z.url().describe('Needs the API key; answers 302 to a signed link to one MP4, valid 10 minutes'),
    hls_url: z.url().describe('Needs the API key; answers 302 to a signed HLS VOD playlist, valid 6 hours'),
  })
  .meta({ id: 'Recording' });

const StreamParams = z.object({ id: z.string().min(1).max(100) });
const RecParams = StreamParams.extend({ recId: z.string().min(1).max(100) });
const errors = { 400: EnvelopeErrorSchema, 401: EnvelopeErrorSchema, 403: EnvelopeErrorSchema, 404: EnvelopeErrorSchema, 409: EnvelopeErrorSchema, 503: EnvelopeErrorSchema };
/** What the signed file route serves from a recording's folder. */
const FILE = /^(index\.m3u8|init-\d{1,6}\.mp4|s\d{1,12}(?:-[a-z]\d{1,15}){6}\.m4s|download-\d+-\d+-\d+\.mp4)$/;

export function recordingRoutes(config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const recordings = ctx.recordings;
    if (!recordings || !ctx.links || !ctx.blobs) return;
    const links = ctx.links;
    const blobs = ctx.blobs;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['recordings'];
    const acc = (req: { account: Account | null }) => req.account!;

    r.get(
      '/v1/streams/:id/recordings',
      { schema: { tags, summary: "The stream's recordings, newest first", params: StreamParams, response: { 200: z.object({ success: z.literal(true), data: z.array(RecordingSchema) }), ...errors } } },
      async (req) => ({ success: true as const, data: await recordings.list(acc(req), req.params.id) }),
    );

    r.get(
      '/v1/streams/:id/recordings/:recId',
      { schema: { tags, summary: 'One recording', params: RecParams, response: { 200: RecordingSchema, ...errors } } },
      async (req) => recordings.get(acc(req), req.params.id, req.params.recId),
    );

    r.delete(
      '/v1/streams/:id/recordings/:recId',
      { schema: { tags, summary: 'Delete a recording (409 while it is being written)', params: RecParams, response: { 200: z.object({ success: z.literal(true), data: z.object({}).strict() }), ...errors } } },
      async (req) => {
        await recordings.delete(acc(req), req.params.id, req.params.recId);
        return { success: true as const, data: {} };
      },
    );

    r.get(
      '/v1/streams/:id/recordings/:recId.m3u8',
      { schema: { tags, summary: 'HLS VOD playlist (EVENT while recording): 302 to a signed link valid 6 hours', params: RecParams, response: { 302: z.null().describe('Redirect to the playlist'), ...errors } } },
      async (req, reply) => reply.redirect(await recordings.playlistLink(acc(req), req.params.id, req.params.recId), 302),
    );

    r.get(
      '/v1/streams/:id/recordings/:recId.mp4',
      { schema: { tags, summary: 'The recording as one MP4 (remuxed, not re-encoded): 302 to a signed link valid 10 minutes', params: RecParams, response: { 302: z.null().describe('Redirect to the file'), ...errors } } },
      async (req, reply) => {
        const file = await recordings.mp4(acc(req), req.params.id, req.params.recId);
        return reply.redirect(recordings.signedPath(req.params.id, req.params.recId, file), 302);
      },
    );

    r.get(
      '/v1/streams/:id/recordings/:recId/links',
      {
        schema: {
          tags,
          summary: 'Signed links to the MP4 (made now if needed) and the playlist, for pages that hold the key in script (a link cannot send it)',
          params: RecParams,
          response: { 200: z.object({ mp4_url: z.url().describe('Valid 10 minutes'), hls_url: z.url().describe('Valid 6 hours') }), ...errors },
        },
      },
      async (req) => {
        const file = await recordings.mp4(acc(req), req.params.id, req.params.recId);
        const origin = config.publicUrl;
        return {
          mp4_url: `${origin}${recordings.signedPath(req.params.id, req.params.recId, file)}`,
          hls_url: `${origin}${await recordings.playlistLink(acc(req), req.params.id, req.params.recId)}`,
        };
      },
    );

    r.get(
      '/files/recordings/:id/:recId/:file',
      {
        config: { public: true },
        schema: {
          hide: true,
          params: z.object({ id: z.string().min(1).max(100), recId: z.string().regex(RECORDING_ID), file: z.string().regex(FILE) }),
          querystring: z.object({ expires: z.coerce.number().int(), signature: z.string().min(1).max(200) }),
        },
      },
      async (req, reply) => {
        const { id, recId, file } = req.params;
        if (!links.verify(`/files/recordings/${id}/${recId}/${file}`, req.query.expires, req.query.signature)) throw streamError('RECORDINGS/LINK_EXPIRED');
        if (file === 'index.m3u8') {
          const text = await recordings.playlist(id, recId);
          if (text === null) throw streamError('RECORDINGS/NOT_FOUND', undefined, { details: { id: recId } });
          return reply.type('application/vnd.apple.mpegurl').header('cache-control', 'no-cache').send(text);
        }
        const key = `recordings/${id}/${recId}/${file}`;
        const info = await blobs.stat(key);
        if (!info) throw streamError('RECORDINGS/NOT_FOUND', `No such file in recording ${recId} (retention may have removed it).`, { details: { id: recId } });
        const mp4 = file.endsWith('.mp4');
        const headers: Record<string, string> = {
          'content-type': mp4 ? 'video/mp4' : 'video/iso.segment',
          // Segments never change once written; a download is named by what it holds.
          'cache-control': `private, max-age=${mp4 && file.startsWith('download-') ? 600 : PLAYLIST_LINK_TTL_S}`,
        };
        if (file.startsWith('download-')) headers['content-disposition'] = `attachment; filename="${recId}.mp4"`;
        return sendByteRange(req, reply, {
          size: info.size,
          headers,
          open: (range) => blobs.createReadStream(key, range ?? undefined),
          refuse: (message, headers) => streamError('REQUEST/RANGE_NOT_SATISFIABLE', message, { headers }),
        });
      },
    );
  };
}

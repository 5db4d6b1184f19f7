/**
 * Byte ranges on the signed file links (songs, clips, recordings): the one owner of `Range`
 * parsing and of the 200 / 206 / 416 answers, so players can seek every file we serve the same way.
 *
 * RFC 9110 §14: one range is served — `bytes=a-b`, `bytes=a-` (to the end) or `bytes=-n` (the
 * last n bytes) — as 206 with `Content-Range: bytes a-b/size`. A range that starts past the end
 * (or `bytes=-0`) is 416, in the area's error shape, with a `Content-Range` of `*` and the size.
 * A header we do not serve — several ranges (`bytes=0-1,5-6`), another unit, or one that does
 * not parse — is ignored, as §14.2 allows: 200 with the whole file. Players send one range;
 * multipart/byteranges would only serve download tools, which take the whole file as well.
 * Every answer, the 416 included, says `Accept-Ranges: bytes`.
 */
import { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** Bytes `start` to `end` of a file, both included (RFC 9110 §14.1.2). */
export interface ByteRange {
  start: number;
  end: number;
}

/** The one range a `Range` header asks of a file of `size` bytes; null when the whole file is to be sent. */
export function byteRange(header: string | undefined, size: number): ByteRange | 'unsatisfiable' | null {
  const m = header ? /^bytes=(\d*)-(\d*)$/.exec(header.trim()) : null;
  if (!m || (m[1] === '' && m[2] === '')) return null;
  let start: number;
  let end: number;
  if (m[1] === '') {
    start = Math.max(0, size - Number(m[2]));
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  }
  if (start >= size || start > end) return 'unsatisfiable';
  return { start, end };
}

export interface ByteRangeFile {
  /** The file's length in bytes. */
  size: number;
  /** Headers of a file answer (content type, disposition, caching); not sent on a 416. */
  headers: Record<string, string>;
  /** The file's bytes: the range asked for, or the whole file for null. */
  open: (range: ByteRange | null) => Readable;
  /** The area's 416 error (its shape); `headers` holds the `Content-Range` it must carry. */
  refuse: (message: string, headers: Record<string, string>) => Error;
}

/**
 * Answers a file with the range the request asks for: 206 with those bytes, 200 with all of them,
 * or throws the area's 416 for a range past the end. HEAD answers the same status and headers
 * without opening the file.
 */
export function sendByteRange(req: FastifyRequest, reply: FastifyReply, file: ByteRangeFile): FastifyReply {
  const { size } = file;
  const range = byteRange(req.headers.range, size);
  if (range === 'unsatisfiable') {
    // The header echoed back is cut to 100 characters: it is the client's, and may be long.
    throw file.refuse(`Range "${(req.headers.range ?? '').slice(0, 100)}" asks for no byte of the file (${size} bytes): a range must start before byte ${size}.`, {
      'accept-ranges': 'bytes',
      'content-range': `bytes */${size}`,
    });
  }
  void reply.headers(file.headers).header('accept-ranges', 'bytes');
  if (range) void reply.code(206).header('content-range', `bytes ${range.start}-${range.end}/${size}`);
  void reply.header('content-length', String(range ? range.end - range.start + 1 : size));
  // fastify's HEAD route drains a stream body and keeps our Content-Length; an empty one reads nothing.
  return reply.send(req.method === 'HEAD' ? Readable.from([]) : file.open(range));
}

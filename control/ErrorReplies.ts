/**
 * Turns every failure into the spec's shape for its area — never a framework-default body.
 * Each area plugin installs `areaErrorHandler(area)` and `areaNotFoundHandler(area)`; the root
 * uses Area B's (the default for paths outside the music base path).
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import { isStoreUnavailable } from '../store/index.ts';
import { ApiError, musicError, streamError, type Area } from '../errors/index.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** W3C trace id for this request (from `traceparent`, or new). */
    traceId: string;
  }
}

interface Issue {
  path: (string | number)[];
  message: string;
}

/** `params.t_index_list[1]` style path for messages and `details`. */
export function fieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`;
    else out += out ? `.${String(p)}` : String(p);
  }
  return out || '(body)';
}

function validationIssues(err: FastifyError): { issues: Issue[]; where: string } {
  const where = (err as { validationContext?: string }).validationContext ?? 'body';
  const raw = (err.validation ?? []) as unknown as { instancePath?: string; message?: string; params?: { issue?: { path?: PropertyKey[]; message?: string } } }[];
  const issues = raw.map((v) => {
    const issue = v.params?.issue;
    // fastify-type-provider-zod hands the path as `instancePath` only; digit segments are array indexes.
    const path = issue?.path ?? (v.instancePath ?? '').split('/').filter(Boolean).map((p) => (/^\d+$/.test(p) ? Number(p) : p));
    // Array indices arrive as strings from JSON-pointer paths: show them as [i].
    const clean = path.map((p) => (typeof p === 'symbol' ? String(p) : typeof p === 'string' && /^\d+$/.test(p) ? Number(p) : p));
    return { path: clean as (string | number)[], message: issue?.message ?? v.message ?? 'invalid' };
  });
  return { issues, where };
}

/** Maps anything thrown during a request to an ApiError of `area`. */
export function toApiError(area: Area, err: unknown): ApiError {
  if (err instanceof ApiError) {
    if (err.area === area) return err;
    // Thrown by shared code for the other area: keep status and text, re-shape.
    return new ApiError(area, err.code, err.status, err.message, err.details, err.extra, err.headers, err.cause);
  }
  const e = err as FastifyError;
  if (hasZodFastifySchemaValidationErrors(e)) {
    const { issues, where } = validationIssues(e);
    const first = issues[0];
    const field = first ? fieldPath(first.path) : where;
    const message = first ? `${where === 'body' ? '' : `${where} `}${field}: ${first.message}` : 'The request is invalid.';
    const details = { where, issues: issues.map((i) => ({ field: fieldPath(i.path), message: i.message })) };
    return area === 'music' ? musicError('invalid_request', message) : streamError('REQUEST/INVALID', message, { details });
  }
  if (isResponseSerializationError(e)) {
    return area === 'music' ? musicError('internal_error', undefined, { cause: err }) : streamError('INTERNAL/ERROR', undefined, { cause: err });
  }
  switch (e?.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return area === 'music'
        ? musicError('unsupported_media_type')
        : streamError('REQUEST/UNSUPPORTED_MEDIA_TYPE', undefined, { details: { content_type: e.message } });
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return area === 'music' ? musicError('payload_too_large') : streamError('REQUEST/TOO_LARGE');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return area === 'music' ? musicError('malformed_json', `The body is not valid JSON: ${e.message}`) : streamError('REQUEST/MALFORMED_JSON', `The body is not valid JSON: ${e.message}`);
  }
  // JSON.parse errors surface as SyntaxError with statusCode 400.
  if (e instanceof SyntaxError || (e?.statusCode === 400 && /JSON/i.test(e.message))) {
    return area === 'music' ? musicError('malformed_json') : streamError('REQUEST/MALFORMED_JSON');
  }
  if (isStoreUnavailable(err)) {
    // The store is restarting (Redis down): the request was held while it reconnected, then given up.
    const headers = { 'retry-after': '5' };
    return area === 'music'
      ? musicError('service_unavailable', undefined, { headers, cause: err })
      : streamError('SERVICE/UNAVAILABLE', 'The service is briefly unavailable (its store is reconnecting); try again shortly.', { headers, cause: err });
  }
  const status = e?.statusCode ?? 500;
  if (status === 413) return area === 'music' ? musicError('payload_too_large') : streamError('REQUEST/TOO_LARGE');
  if (status === 415) return area === 'music' ? musicError('unsupported_media_type') : streamError('REQUEST/UNSUPPORTED_MEDIA_TYPE');
  if (status >= 400 && status < 500) {
    return area === 'music' ? musicError('invalid_request', e.message, { cause: err }) : streamError('REQUEST/INVALID', e.message, { cause: err });
  }
  return area === 'music' ? musicError('internal_error', undefined, { cause: err }) : streamError('INTERNAL/ERROR', undefined, { cause: err });
}

/** Writes `err` in the shape of its area. */
export function sendApiError(reply: FastifyReply, request: FastifyRequest, err: ApiError): FastifyReply {
  for (const [k, v] of Object.entries(err.headers)) void reply.header(k, v);
  void reply.code(err.status).type('application/json; charset=utf-8');
  if (err.area === 'music') {
    return reply.send({ error: err.code, message: err.message, ...err.extra });
  }
  return reply.send({
    success: false,
    error: err.message,
    code: err.code,
    status: err.status,
    details: err.details ?? null,
    requestId: String(request.id),
    traceId: request.traceId,
  });
}

export function areaErrorHandler(area: Area) {
  return function handler(this: unknown, err: unknown, request: FastifyRequest, reply: FastifyReply) {
    const apiErr = toApiError(area, err);
    if (apiErr.status >= 500) request.log.error({ err }, 'request failed');
    else request.log.info({ code: apiErr.code, status: apiErr.status }, 'request refused');
    return sendApiError(reply, request, apiErr);
  };
}

export function areaNotFoundHandler(area: Area) {
  return function notFound(request: FastifyRequest, reply: FastifyReply) {
    const err = area === 'music' ? musicError('route_not_found', `No route ${request.method} ${request.url.split('?')[0]}.`) : streamError('ROUTE/NOT_FOUND', `No route ${request.method} ${request.url.split('?')[0]}.`);
    return sendApiError(reply, request, err);
  };
}

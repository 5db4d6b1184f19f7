/**
 * The fastify app factory, kept apart from the server entry (control/Server.ts) so tests build
 * apps with `buildApp(config, ctx)` and `app.inject()`. It knows nothing of roles or processes:
 * the routes it mounts depend on which services `ctx` carries.
 */
import { randomBytes } from 'node:crypto';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from 'fastify';
import {
  jsonSchemaTransform,
  jsonSchemaTransformObject,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import type { Account } from '../store/index.ts';
import { AccountCache } from './AccountCache.ts';
import { RequestIds } from './RequestIds.ts';
import { RequestLogger } from './RequestLogger.ts';
import { responseSerializerCompiler } from './ResponseSerializer.ts';
import { bearerToken, traceIdFrom } from './ApiKeys.ts';
import type { Config } from './config.ts';
import { areaErrorHandler, areaNotFoundHandler, sendApiError, toApiError } from './ErrorReplies.ts';
import { musicError, streamError, type Area } from '../errors/index.ts';
import { capabilitiesRoutes } from './routes/capabilities.ts';
import { controlRoutes } from './routes/control.ts';
import { clipRoutes } from './routes/clips.ts';
import { recordingRoutes } from './routes/recordings.ts';
import { slateRoutes } from './routes/slate.ts';
import { admissionRoutes } from './routes/admission.ts';
import { musicRoutes } from './routes/music.ts';
import { outputRoutes } from './routes/outputs.ts';
import { soundtrackRoutes } from './routes/soundtrack.ts';
import { systemRoutes } from './routes/system.ts';
import { streamRoutes } from './routes/streams.ts';
import { webhookRoutes } from './routes/webhooks.ts';
import type { AppContext } from './Services.ts';
import { ControlTokens, StreamControl } from '../streams/index.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated account; set by the area's auth hook on routes that need a key. */
    account: Account | null;
  }
  interface FastifyContextConfig {
    /** Route needs no API key (downloads, health, docs). */
    public?: boolean;
  }
}

export type App = ReturnType<typeof createFastify>;

/** Where a request keeps its trace id once made. */
const TRACE_ID = Symbol('traceId');

/**
 * Fastify with our request ids, body limit and logger; its type is the app's type. `requestDone`
 * writes a request's access line and metrics; it is called here for the requests the router
 * refuses, for which no hook runs.
 */
function createFastify(config: Readonly<Config>, logger: Logger, requestDone: (request: FastifyRequest, status: number, ms: number) => void) {
  const requestIds = new RequestIds();
  // The app's logger type is the interface fastify asks of a logger, not pino's: request.log is a
  // RequestLogger (below), which is that interface and no more.
  const loggerInstance: FastifyBaseLogger = logger;
  return Fastify({
    loggerInstance,
    bodyLimit: config.bodyLimit,
    // req.ip is the client's address: the TCP peer's, or behind a trusted proxy (TRUSTED_PROXIES)
    // the X-Forwarded-For entry left of the last trusted hop. Per-address limits and logs use it.
    trustProxy: config.trustedProxies.length > 0 ? [...config.trustedProxies] : false,
    // Our ids; a caller's X-Request-Id is kept when it is sane, so logs join up across services.
    genReqId: (req) => requestIds.forRequest(req.headers['x-request-id']),
    // request.log makes its child logger (with the request id) only when something is logged.
    childLoggerFactory: (parent, bindings, options) => new RequestLogger(parent, bindings, options),
    // We log one line per request ourselves (onResponse), with the route pattern and timing.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    // Errors the router raises before any route runs (bad percent-encoding, an over-long path
    // segment, a content type it cannot parse) answer in the shape of the area the URL is in.
    frameworkErrors: (error, request, reply) => {
      const startMs = performance.now();
      const area = request.url === config.musicBasePath || request.url.startsWith(`${config.musicBasePath}/`) ? 'music' : 'streams';
      // No hook runs for these (the request is fastify's bare one, without our decorators), so
      // the trace id and the X-Request-Id header are set here.
      request.traceId = traceIdFrom(request.headers.traceparent as string | undefined);
      void reply.header('x-request-id', request.id);
      reply.raw.once('finish', () => requestDone(request, reply.statusCode, performance.now() - startMs));
      const message =
        error.code === 'FST_ERR_BAD_URL'
          ? 'The URL is malformed (a percent-encoding is not valid UTF-8).'
          : error.code === 'FST_ERR_MAX_PARAM_LENGTH'
            ? 'A path segment is longer than 200 characters.'
            : 'The request is invalid.';
      void sendApiError(reply, request, toApiError(area, Object.assign(new Error(message), { statusCode: error.statusCode ?? 400 })));
    },
  }).withTypeProvider<ZodTypeProvider>();
}

export async function buildApp(config: Readonly<Config>, ctx: AppContext): Promise<App> {
  const app = createFastify(config, ctx.logger, (request, status, ms) => requestDone(ctx, request, status, ms));
  const accounts = new AccountCache({ store: ctx.store, ttlMs: config.authCache.ttlMs, maxEntries: config.authCache.maxKeys });

  app.setValidatorCompiler(validatorCompiler);
  // Checks each response against its schema, then JSON; see control/ResponseSerializer.ts.
  app.setSerializerCompiler(responseSerializerCompiler);
  // Only JSON bodies in the REST areas: text/plain would otherwise be parsed as a string and fail
  // validation with a confusing 400 instead of a clear 415. (WHIP registers application/sdp in its own scope.)
  app.removeContentTypeParser('text/plain');

  app.decorateRequest('account', null);
  // The trace id is made when first read (error envelopes, the control socket): most requests
  // never need one, and a random one per request was work on every request's path.
  app.decorateRequest('traceId', {
    getter(this: FastifyRequest & { [TRACE_ID]?: string }) {
      return (this[TRACE_ID] ??= traceIdFrom(this.headers.traceparent as string | undefined));
    },
    setter(this: FastifyRequest & { [TRACE_ID]?: string }, traceId: string) {
      this[TRACE_ID] = traceId;
    },
  });
  // Callback hooks that finish at once: an async hook costs a promise and a microtask turn each.
  app.addHook('onRequest', (request, reply, done) => {
    void reply.header('x-request-id', request.id);
    done();
  });
  app.addHook('onResponse', (request, reply, done) => {
    requestDone(ctx, request, reply.statusCode, reply.elapsedTime);
    done();
  });

  // /openapi.json declares per operation what the auth hooks below enforce: a route they let
  // through (`config: { public: true }`) needs no API key, so it declares `security: []` unless it
  // names a credential it checks itself (WHIP's stream key, the control socket's token).
  app.addHook('onRoute', (route) => {
    if (route.config?.public !== true || route.schema?.security !== undefined) return;
    route.schema = { ...route.schema, security: [] };
  });

  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Reverie API',
        version: '1.0.0',
        description:
          'Area A (songs) lives under the music base path; Area B (live video streams and webhooks) under /v1 and /beta. ' +
          'Authenticate with `Authorization: Bearer <API_KEY>`.',
      },
      servers: [{ url: config.publicUrl }],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key.' },
          streamKey: { type: 'http', scheme: 'bearer', description: "The stream's `stream_key` (WHIP publish, RFC 9725)." },
          controlToken: { type: 'apiKey', in: 'query', name: 'token', description: 'A control token from POST /v1/streams/{id}/control-token (60 s, one stream).' },
        },
      },
      security: [{ bearerAuth: [] }],
    },
    transform: jsonSchemaTransform,
    transformObject: jsonSchemaTransformObject,
  });
  await app.register(fastifySwaggerUi, { routePrefix: '/docs', uiConfig: { deepLinking: true } });

  // Area B's shapes are the default for everything outside the music base path.
  app.setErrorHandler(areaErrorHandler('streams'));
  app.setNotFoundHandler(areaNotFoundHandler('streams'));

  await app.register(systemRoutes(config, ctx));

  await app.register(
    async (area) => {
      area.setErrorHandler(areaErrorHandler('music'));
      area.setNotFoundHandler(areaNotFoundHandler('music'));
      area.addHook('onRequest', authHook('music', accounts));
      await area.register(musicRoutes(config, ctx));
    },
    { prefix: config.musicBasePath },
  );

  // Live control (WebSocket, timed changes): one per app, over the stream service.
  const control = ctx.streams ? new StreamControl({ streams: ctx.streams, songs: ctx.songs, logger: ctx.logger }) : undefined;
  const controlTokens = new ControlTokens(ctx.links ? ctx.links.derive('control-token') : randomBytes(32));
  const areaCtx = { ...ctx, control, controlTokens };
  await app.register(async (area) => {
    area.addHook('onRequest', authHook('streams', accounts));
    await area.register(streamRoutes(config, areaCtx));
    await area.register(clipRoutes(config, areaCtx));
    await area.register(recordingRoutes(config, areaCtx));
    await area.register(slateRoutes(config, areaCtx));
    await area.register(admissionRoutes(config, areaCtx));
    await area.register(outputRoutes(config, areaCtx));
    await area.register(soundtrackRoutes(config, areaCtx));
    await area.register(capabilitiesRoutes(config, areaCtx));
    await area.register(controlRoutes(config, areaCtx));
    await area.register(webhookRoutes(config, ctx));
  });

  if (ctx.mediaRoutes) await app.register(ctx.mediaRoutes);
  if (ctx.webRoutes) await app.register(ctx.webRoutes);
  return app;
}

/** A request's metrics and access line (`request done`), once it is answered; `ms` since it was routed. */
function requestDone(ctx: AppContext, request: FastifyRequest, status: number, ms: number): void {
  const route = request.routeOptions.url ?? 'unmatched';
  ctx.metrics.httpRequests.inc({ method: request.method, route, status: String(status) });
  ctx.metrics.httpDuration.observe({ method: request.method, route }, ms / 1000);
  // The app's logger with the request id among the fields: the line a per-request child would
  // write, without making one.
  if (ctx.logger.isLevelEnabled('info')) {
    ctx.logger.info({ requestId: request.id, method: request.method, route, url: request.url.split('?')[0], status, ms: Math.round(ms * 10) / 10, client: request.ip }, 'request done');
  }
}

/** Bearer auth for every route of an area except those marked `config: { public: true }` and unknown routes (they 404). */
function authHook(area: Area, accounts: AccountCache) {
  return async function auth(request: FastifyRequest, reply: FastifyReply) {
    if (request.routeOptions.config.public || request.routeOptions.url === undefined) return;
    const account = await accounts.authenticate(bearerToken(request.headers.authorization));
    if (!account) {
      void reply.header('www-authenticate', 'Bearer');
      return sendApiError(reply, request, area === 'music' ? musicError('unauthorized') : streamError('AUTH/UNAUTHORIZED'));
    }
    request.account = account;
  };
}

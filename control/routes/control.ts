/**
 * Live control routes: `POST /v1/streams/{id}/control-token` (a short-lived token for pages that
 * cannot send the API key) and the per-stream WebSocket `GET /v1/streams/{id}/control` (upgrade).
 * The socket's messages are in control/ControlMessages.ts; docs/control.md walks through them.
 *
 * The upgrade is answered on fastify's HTTP server (`upgrade` event) before fastify routes it, so
 * auth is done here: `Authorization: Bearer <API key>` or `?token=<control token>`. A refused
 * upgrade gets a plain HTTP answer with the Area B error envelope (browsers only see the socket
 * fail; Node clients and the status code say why). The same path over plain HTTP answers 400.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Account } from '../../store/index.ts';
import { authenticate, bearerToken, traceIdFrom } from '../ApiKeys.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { ControlSockets } from '../ControlSockets.ts';
import type { ControlTokens, StreamControl } from '../../streams/index.ts';
import { toApiError } from '../ErrorReplies.ts';
import { streamError, type ApiError } from '../../errors/index.ts';
import { createWebSocketServer } from '../WebSockets.ts';
import { EnvelopeErrorSchema } from './streams.ts';

const CONTROL_PATH = /^\/v1\/streams\/([^/?#]{1,100})\/control\/?$/;

const IdParams = z.object({ id: z.string().min(1).max(100) });
const errors = { 400: EnvelopeErrorSchema, 401: EnvelopeErrorSchema, 404: EnvelopeErrorSchema, 429: EnvelopeErrorSchema, 503: EnvelopeErrorSchema };

const STATUS_TEXT: Record<number, string> = { 401: 'Unauthorized', 404: 'Not Found', 429: 'Too Many Requests', 500: 'Internal Server Error', 503: 'Service Unavailable' };

/** Writes a refused upgrade as an HTTP answer in the Area B envelope, then closes the socket. */
function refuse(socket: Duplex, err: ApiError, requestId: string, traceId: string): void {
  const body = JSON.stringify({ success: false, error: err.message, code: err.code, status: err.status, details: err.details ?? null, requestId, traceId });
  const extra = err.status === 401 ? 'WWW-Authenticate: Bearer\r\n' : '';
  socket.end(
    `HTTP/1.1 ${err.status} ${STATUS_TEXT[err.status] ?? 'Bad Request'}\r\n` +
      `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n${extra}\r\n${body}`,
  );
}

export function controlRoutes(config: Readonly<Config>, ctx: AppContext & { control?: StreamControl; controlTokens?: ControlTokens }): FastifyPluginAsync {
  return async (app) => {
    const service = ctx.streams;
    const control = ctx.control;
    const tokens = ctx.controlTokens;
    if (!service || !control || !tokens) return;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['streams'];

    r.post(
      '/v1/streams/:id/control-token',
      {
        schema: {
          tags,
          summary: 'A short-lived token that opens the control WebSocket of this stream (for pages that must not hold the API key)',
          params: IdParams,
          response: { 200: z.object({ token: z.string(), expires_at: z.number().describe('ms since the epoch'), url: z.string().describe('The WebSocket URL with the token') }), ...errors },
        },
      },
      async (req) => {
        const account = req.account!;
        await service.get(account, req.params.id);
        const { token, expiresAt } = tokens.issue(account.id, req.params.id);
        const base = config.publicUrl.replace(/^http/, 'ws').replace(/\/+$/, '');
        return { token, expires_at: expiresAt, url: `${base}/v1/streams/${req.params.id}/control?token=${encodeURIComponent(token)}` };
      },
    );

    // Documents the socket in /openapi.json; reached without an upgrade it says what it is.
    r.get(
      '/v1/streams/:id/control',
      {
        schema: {
          tags,
          summary: 'The control WebSocket (upgrade only): param updates with acks, at/on_beat scheduling, transitions; status and stats pushed. See docs/control.md',
          params: IdParams,
          querystring: z.object({ token: z.string().max(1000).optional().describe('A control token, instead of the Authorization header') }),
          response: errors,
          // The auth hook lets the route through; the upgrade checks the key or the token itself.
          security: [{ bearerAuth: [] }, { controlToken: [] }],
        },
        config: { public: true },
      },
      async () => {
        throw streamError('REQUEST/INVALID', 'upgrade: this path takes a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)', {
          details: { where: 'headers', issues: [{ field: 'upgrade', message: 'expected websocket' }] },
        });
      },
    );

    const wss = createWebSocketServer(config.control.maxMessageBytes);
    const sockets = new ControlSockets({ limits: config.control, streams: service, control, logger: ctx.logger });

    const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      const m = CONTROL_PATH.exec(url.pathname);
      if (!m) {
        // Nobody else takes upgrades on this server: answer instead of leaving the socket hanging.
        if (app.server.listenerCount('upgrade') === 1) refuse(socket, streamError('ROUTE/NOT_FOUND', `No WebSocket at ${url.pathname}.`), 'upgrade', traceIdFrom(undefined));
        return;
      }
      socket.on('error', () => socket.destroy());
      const streamId = decodeURIComponent(m[1] as string);
      const traceId = traceIdFrom(req.headers.traceparent as string | undefined);
      const requestId = `upg_${traceId.slice(0, 12)}`;
      void (async () => {
        sockets.admitStream(streamId);
        let account: Account | null = null;
        let expiresAt: number | null = null;
        const bearer = bearerToken(req.headers.authorization);
        const token = url.searchParams.get('token');
        if (bearer) account = await authenticate(ctx.store, bearer);
        else if (token) {
          const claims = tokens.verify(token, streamId);
          account = claims ? await ctx.store.accounts.get(claims.accountId) : null;
          expiresAt = claims?.expiresAt ?? null;
        }
        if (!account) throw streamError('AUTH/UNAUTHORIZED', 'Send Authorization: Bearer <API key>, or ?token= from POST /v1/streams/{id}/control-token (valid 60 s, for this stream).');
        await service.get(account, streamId);
        const acc = account;
        // Admitted and upgraded in one tick: ws upgrades synchronously, so the count cannot race.
        sockets.admit(acc, streamId);
        wss.handleUpgrade(req, socket, head, (ws) => {
          sockets.open(ws, {
            account: acc,
            streamId,
            traceId,
            credential: expiresAt === null ? { kind: 'key' } : { kind: 'token', expiresAt },
            verifyToken: (fresh) => {
              const claims = tokens.verify(fresh, streamId);
              return claims && claims.accountId === acc.id ? claims.expiresAt : null;
            },
          });
        });
      })().catch((err: unknown) => {
        const apiErr = toApiError('streams', err);
        if (apiErr.status >= 500) ctx.logger.error({ err }, 'control upgrade failed');
        refuse(socket, apiErr, requestId, traceId);
      });
    };
    app.server.on('upgrade', onUpgrade);
    // Open sockets would keep server.close() waiting: end them first.
    app.addHook('preClose', async () => {
      app.server.off('upgrade', onUpgrade);
      sockets.close(true);
      control.close();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    });
  };
}

/**
 * Admission rules (Area B error shape): who may publish (WHIP) and play (WHEP, LL-HLS) beyond the
 * stream key and the playback id. A stream's own rule wins over its account's default. Two kinds:
 * an HTTP hook (we POST the request to the account's HTTPS URL; 2xx admits) and a JWT rule (the
 * client brings a token signed by the rule's public key or a key of its JWKS, naming the playback
 * id as `sub`). docs/api.md "Admission" has the request we send and worked examples.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Account } from '../../store/index.ts';
import type { AppContext } from '../Services.ts';
import type { Config } from '../config.ts';
import { EnvelopeErrorSchema } from './streams.ts';

const Actions = z
  .array(z.enum(['publish', 'read']))
  .min(1)
  .max(2)
  .describe('What the rule gates: `publish` (WHIP) and/or `read` (WHEP and LL-HLS); the others are admitted as without a rule');

/** The longest PEM public key taken (an RSA-8192 SPKI PEM is ≈ 1.5 KB), chars. */
const PEM_MAX = 8192;

const HookRule = z
  .object({
    type: z.literal('hook'),
    url: z.string().max(2048).describe('HTTPS URL we POST each request to (public host; the same address rules as webhooks)'),
    actions: Actions,
  })
  .strict();
const JwtRule = z
  .object({
    type: z.literal('jwt'),
    public_key: z.string().max(PEM_MAX).optional().describe('PEM public key (RSA 2048+ for RS256, EC P-256 for ES256, Ed25519 for EdDSA)'),
    jwks_url: z.string().max(2048).optional().describe('HTTPS URL of a JWKS (fetched through the webhooks’ address rules, cached)'),
    actions: Actions,
  })
  .strict();

export const AdmissionRuleInputSchema = z.discriminatedUnion('type', [HookRule, JwtRule]).meta({ id: 'AdmissionRuleBody' });

const RuleView = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('hook'), url: z.string(), actions: z.array(z.enum(['publish', 'read'])) }),
    z.object({ type: z.literal('jwt'), public_key: z.string().nullable(), jwks_url: z.string().nullable(), actions: z.array(z.enum(['publish', 'read'])) }),
  ])
  .meta({ id: 'AdmissionRule' });

export const AdmissionSchema = z
  .object({
    rule: RuleView.nullable().describe('The rule that applies; null when none'),
    source: z.enum(['stream', 'account', 'none']).describe("Where it is set: the stream's own, the account's default, or none"),
  })
  .meta({ id: 'Admission' });

const StreamParams = z.object({ id: z.string().min(1).max(100) });
const errors = { 400: EnvelopeErrorSchema, 401: EnvelopeErrorSchema, 404: EnvelopeErrorSchema };

export function admissionRoutes(_config: Readonly<Config>, ctx: AppContext): FastifyPluginAsync {
  return async (app) => {
    const admission = ctx.admission;
    if (!admission) return;
    const r = app.withTypeProvider<ZodTypeProvider>();
    const tags = ['streams'];
    const acc = (req: { account: Account | null }) => req.account!;

    r.put(
      '/v1/streams/:id/admission',
      { schema: { tags, summary: "Set the stream's admission rule (a hook or a JWT rule); it applies to new sessions and requests within seconds", params: StreamParams, body: AdmissionRuleInputSchema, response: { 200: AdmissionSchema, ...errors } } },
      async (req) => admission.setForStream(acc(req), req.params.id, req.body),
    );
    r.get(
      '/v1/streams/:id/admission',
      { schema: { tags, summary: 'The admission rule that applies to the stream, and where it is set', params: StreamParams, response: { 200: AdmissionSchema, ...errors } } },
      async (req) => admission.getForStream(acc(req), req.params.id),
    );
    r.delete(
      '/v1/streams/:id/admission',
      { schema: { tags, summary: "Remove the stream's own rule (the account's default, if any, applies again)", params: StreamParams, response: { 200: AdmissionSchema, ...errors } } },
      async (req) => admission.clearForStream(acc(req), req.params.id),
    );

    r.put(
      '/v1/account/admission',
      { schema: { tags, summary: "Set the account's default admission rule (streams without one of their own)", body: AdmissionRuleInputSchema, response: { 200: AdmissionSchema, ...errors } } },
      async (req) => admission.setForAccount(acc(req), req.body),
    );
    r.get('/v1/account/admission', { schema: { tags, summary: "The account's default admission rule", response: { 200: AdmissionSchema, ...errors } } }, async (req) => admission.getForAccount(acc(req)));
    r.delete(
      '/v1/account/admission',
      { schema: { tags, summary: "Remove the account's default admission rule", response: { 200: AdmissionSchema, ...errors } } },
      async (req) => admission.clearForAccount(acc(req)),
    );
  };
}

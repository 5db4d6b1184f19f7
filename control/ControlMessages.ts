/**
 * The messages of the per-stream control WebSocket (docs/control.md), one JSON object per text
 * frame, each with a `type`. Validated with zod like every HTTP body; an invalid message is
 * answered with an `error` message naming the field, in the Area B error envelope.
 */
import { z } from 'zod';
import { CONTROL_LIMITS, ParamsInputSchema } from '../streams/index.ts';

const EpochMs = z.number().finite().min(0).max(8.64e15).describe('ms since the epoch, on the server clock (see ping)');
const ClientId = z.string().min(1).max(64).regex(/^[A-Za-z0-9._:-]+$/, 'letters, digits and ._:- only');

export const TempoSchema = z
  .object({
    bpm: z.number().min(20, 'must be at least 20').max(400, 'must be at most 400').optional(),
    phase: EpochMs.optional().describe('ms since the epoch of a downbeat; default now'),
    beats_per_bar: z.number().int().min(1).max(16).optional().describe('Default 4'),
    tempo_from_song: z.string().min(1).max(100).optional().describe("A song id of the account's: its bpm"),
  })
  .strict();

export const ClientMessageSchema = z.discriminatedUnion('type', [
  z
    .object({
      type: z.literal('update'),
      id: ClientId.optional().describe('Echoed in the ack; generated when absent'),
      params: ParamsInputSchema,
      at: EpochMs.optional(),
      on_beat: z
        .union([z.literal(true), z.object({ every: z.union([z.number().int().min(1).max(64), z.literal('bar')]) }).strict()])
        .optional()
        .describe('true = the next beat; { every: n } = the next n-th beat from the phase; { every: "bar" } = the next downbeat'),
      tempo: TempoSchema.optional(),
      transition: z
        .object({
          steps: z.number().int().min(1).max(CONTROL_LIMITS.maxTransitionSteps),
          method: z.enum(['linear', 'slerp']).default('slerp'),
        })
        .strict()
        .optional(),
    })
    .strict(),
  z.object({ type: z.literal('tempo') }).extend(TempoSchema.shape).strict(),
  z.object({ type: z.literal('cancel'), id: ClientId }).strict(),
  z.object({ type: z.literal('ping'), id: ClientId.optional(), client_time: z.number().finite().optional() }).strict(),
  z.object({ type: z.literal('token'), id: ClientId.optional(), token: z.string().min(1).max(1000).describe('A fresh control token of this stream: the socket stays open until it expires') }).strict(),
]);
export type ClientMessage = z.infer<typeof ClientMessageSchema>;

import t from 'tap';
import { parseEventJob, streamEndedEvent, streamStartedEvent, webhookEventJob } from '../../webhooks/WebhookEvent.ts';

const stream = {
  id: 'str_abc',
  pipeline: 'streamdiffusion' as const,
  createdAt: '2026-03-01T10:00:00.000Z',
  startedAt: '2026-03-01T10:00:05.000Z',
  endedAt: '2026-03-01T10:30:05.400Z',
  endReason: 'credits_exhausted' as const,
  gatewayHost: 'gw1.example.com',
};

void t.test('stream.started carries the spec envelope and data fields', { timeout: 5_000 }, async (t) => {
  const e = streamStartedEvent(stream, { nowMs: Date.parse('2026-03-01T10:00:06Z'), sequence: 3 });
  t.match(e.id, /^evt_[0-9a-f]{24}$/);
  t.same(e, {
    id: e.id,
    type: 'stream.started',
    created_at: '2026-03-01T10:00:06.000Z',
    data: {
      stream_id: 'str_abc',
      sequence: 3,
      pipeline_id: 'streamdiffusion',
      started_at: '2026-03-01T10:00:05.000Z',
      created_at: '2026-03-01T10:00:00.000Z',
      gateway_host: 'gw1.example.com',
    },
  });
  t.not(streamStartedEvent(stream).id, streamStartedEvent(stream).id, 'a reconnect gets a fresh event id');
});

void t.test('stream.ended carries ended_at, whole duration_seconds and the reason', { timeout: 5_000 }, async (t) => {
  const e = streamEndedEvent(stream, { id: 'evt_fixed', nowMs: Date.parse('2026-03-01T10:31:00Z'), sequence: 4 });
  t.same(e, {
    id: 'evt_fixed',
    type: 'stream.ended',
    created_at: '2026-03-01T10:31:00.000Z',
    data: {
      stream_id: 'str_abc',
      sequence: 4,
      pipeline_id: 'streamdiffusion',
      started_at: '2026-03-01T10:00:05.000Z',
      ended_at: '2026-03-01T10:30:05.400Z',
      duration_seconds: 1800,
      reason: 'credits_exhausted',
      gateway_host: 'gw1.example.com',
    },
  });
});

void t.test('the outbox job lives in queue events with the event id as job id and round-trips', { timeout: 5_000 }, async (t) => {
  const e = streamEndedEvent(stream);
  const job = webhookEventJob(e, 'acc_1');
  t.equal(job.queue, 'events');
  t.equal(job.id, e.id);
  t.same(parseEventJob(JSON.parse(JSON.stringify(job.payload))), { kind: 'webhook_event', accountId: 'acc_1', event: e });
  const ordered = webhookEventJob(e, 'acc_1', { after: 'evt_started' });
  t.same(parseEventJob(JSON.parse(JSON.stringify(ordered.payload))), { kind: 'webhook_event', accountId: 'acc_1', event: e, after: 'evt_started' }, 'after rides in the job, not the event');
  t.equal(parseEventJob({ ...(ordered.payload as object), after: 7 }), null);
  t.equal(parseEventJob(null), null);
  t.equal(parseEventJob({ kind: 'other' }), null);
  t.equal(parseEventJob({ kind: 'webhook_event', accountId: 'acc_1', event: { id: 'evt_1', type: 'stream.paused', data: {} } }), null);
});

/** Area B webhook management for app tests: the real WebhookService on the test's store. */
import pino from 'pino';
import type { Test } from 'tap';
import { createWebhooks } from '../../webhooks/index.ts';
import type { Store } from '../../store/index.ts';

export function webhookServices(t: Test, { store }: { store: Store }) {
  const webhooks = createWebhooks({ store, logger: pino({ level: 'silent' }) });
  t.teardown(() => webhooks.close());
  return { webhooks: webhooks.service };
}

/**
 * An app with the Area B streams service on a real embedded store and a real (idle) MediaNode in
 * this process, reached through InProcessMediaNodeClient as in the embedded default.
 */
import { AddressPolicy, type ResolvedAddress } from '../../outbound/index.ts';
import pino from 'pino';
import type { Test } from 'tap';
import { InProcessMediaNodeClient } from '../../streams/InProcessMediaNodeClient.ts';
import { StreamService } from '../../streams/StreamService.ts';
import { MediaNode, registerMediaRoutes } from '../../media/index.ts';
import type { Config, ConfigEnv } from '../../control/config.ts';
import type { Store } from '../../store/index.ts';
import { makeApp, type TestApp } from '../helpers/app.ts';
import { songServices } from '../helpers/songs.ts';

export const PUBLIC_URL = 'https://media.example.test';

/**
 * DNS for output_rtmp_url checks (the machine has no resolver for the internet): public names
 * resolve to a public address, `*.rebind.example.com` to a private one, anything else fails.
 */
const fakeDns = async (host: string): Promise<ResolvedAddress[]> => {
  if (host.endsWith('.rebind.example.com')) return [{ address: '1.1.1.1', family: 4 }, { address: '10.0.0.5', family: 4 }];
  if (host.endsWith('example.com')) return [{ address: '1.1.1.1', family: 4 }];
  throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
};

export interface StreamTestApp extends TestApp {
  node: MediaNode;
  media: InProcessMediaNodeClient;
  service: StreamService;
  /** `Authorization` header for a fresh account on `plan`. */
  auth(plan?: Parameters<TestApp['key']>[0]): Promise<{ authorization: string }>;
}

export async function makeStreamApp(
  t: Test,
  opts: { now?: () => number; models?: string[]; capacity?: number; songs?: boolean; env?: Partial<ConfigEnv> } = {},
): Promise<StreamTestApp> {
  let node: MediaNode | null = null;
  let media: InProcessMediaNodeClient | null = null;
  let service: StreamService | null = null;
  const base = await makeApp(t, {
    env: { PUBLIC_URL, ...opts.env },
    ...(opts.now ? { now: opts.now } : {}),
    services: ({ store, config }: { store: Store; config: Readonly<Config> }) => {
      const logger = pino({ level: 'silent' });
      node = new MediaNode({
        publicUrl: PUBLIC_URL,
        iceAddresses: ['127.0.0.1'],
        logger,
        ...(opts.capacity !== undefined ? { capacity: opts.capacity } : {}),
        resolveIngest: (id, bearer) => service!.resolveIngest(id, bearer),
        resolvePlayback: (pid) => service!.resolvePlayback(pid),
      });
      media = new InProcessMediaNodeClient({
        node,
        models: opts.models ?? ['stabilityai/sd-turbo', 'stabilityai/sdxl-turbo', 'Lykon/dreamshaper-8', 'prompthero/openjourney-v4'],
        demo: true,
        logger,
      });
      service = new StreamService({
        store,
        media,
        publicUrl: PUBLIC_URL,
        logger,
        outboundPolicy: new AddressPolicy({ resolve: fakeDns }),
        deletedStatusTtlMs: config.deletedStreamStatusTtlS * 1000,
        ...(opts.now ? { now: opts.now } : {}),
      });
      const n = node;
      return { streams: service, mediaRoutes: async (app) => registerMediaRoutes(app, n), ...(opts.songs ? songServices({ store }) : {}) };
    },
  });
  t.teardown(() => {
    node?.close();
  });
  return {
    ...base,
    node: node!,
    media: media!,
    service: service!,
    auth: async (plan) => ({ authorization: `Bearer ${await base.key(plan)}` }),
  };
}

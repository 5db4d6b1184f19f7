/**
 * The stream parts of a process when the store is shared (REDIS_URL): every media node — this
 * process's own included — is reached over the store's bus, so an api replica, a media node and a
 * worker run the same StreamService and StreamLifecycle as the embedded default, against a
 * different MediaNodeClient (design.md "One codebase, three roles"):
 *
 * - media role: a MediaNodeAgent registers the local node (heartbeats) and answers for it;
 * - api/media roles: WHIP/WHEP/HLS requests for streams owned by another node are forwarded there
 *   (control's LiveRouter, built on `media` here: routing HTTP is the process's job, not the domain's);
 * - worker role: the DeadNodeSweeper ends the streams of nodes whose heartbeats stopped.
 */
import type { Logger } from 'pino';
import type { MediaNode } from '../media/index.ts';
import type { Store } from '../store/index.ts';
import { BusMediaNodeClient } from './BusMediaNodeClient.ts';
import { DeadNodeSweeper } from './DeadNodeSweeper.ts';
import type { InProcessMediaNodeClient } from './InProcessMediaNodeClient.ts';
import { MediaNodeAgent } from './MediaNodeAgent.ts';

/**
 * A media node's registry id: the host:port of its public URL. Unique per node (each has its own
 * address) and stable across restarts, so a restarted node takes its own place back.
 */
export function mediaNodeId(publicUrl: string): string {
  return new URL(publicUrl).host.replace(/[^A-Za-z0-9_.:-]/g, '-').slice(0, 128);
}

export interface ScaleOutStreamsOptions {
  store: Store;
  logger: Logger;
  /** This process's media node and its direct client (media role), or null. */
  local: { node: MediaNode; client: InProcessMediaNodeClient } | null;
  /** Sweep dead nodes here: worker role. */
  sweep: boolean;
  now?: () => number;
}

export interface ScaleOutStreams {
  /** The client the stream parts of this process use. */
  media: BusMediaNodeClient;
  agent: MediaNodeAgent | null;
  sweeper: DeadNodeSweeper | null;
  /** Registers the local node and starts sweeping. */
  start(): Promise<void>;
  /** Idempotent. Call after the local node closed, so its last events still go out. */
  close(): Promise<void>;
}

export function scaleOutStreams(opts: ScaleOutStreamsOptions): ScaleOutStreams {
  const media = new BusMediaNodeClient({ store: opts.store, logger: opts.logger, ...(opts.now ? { now: opts.now } : {}) });
  const local = opts.local;
  const agent = local ? new MediaNodeAgent({ store: opts.store, local: local.client, logger: opts.logger }) : null;
  const sweeper = opts.sweep ? new DeadNodeSweeper({ store: opts.store, logger: opts.logger, ...(opts.now ? { now: opts.now } : {}) }) : null;
  let closing: Promise<void> | null = null;
  return {
    media,
    agent,
    sweeper,
    async start() {
      await agent?.start();
      sweeper?.start();
    },
    close() {
      closing ??= (async () => {
        const steps = [() => agent?.close(), () => sweeper?.close(), () => local?.client.close(), () => media.close()];
        for (const step of steps) {
          try {
            await step();
          } catch (err) {
            opts.logger.warn({ err }, 'close() | scale-out step failed');
          }
        }
      })();
      return closing;
    },
  };
}

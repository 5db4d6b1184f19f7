import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { Bus, Unsubscribe } from './Store.ts';

/**
 * The embedded store's bus: one process, so an EventEmitter. Messages go through JSON like they
 * would over Redis (each subscriber gets its own copy, `undefined` becomes `null`) and are
 * delivered asynchronously, so a publisher never runs subscriber code inside its own call.
 */
export class LocalBus implements Bus {
  private readonly emitter = new EventEmitter();

  constructor(private readonly logger?: Logger) {
    this.emitter.setMaxListeners(0);
  }

  async publish(channel: string, message: unknown): Promise<void> {
    const json = JSON.stringify(message) ?? 'null';
    setImmediate(() => this.emitter.emit(channel, json));
  }

  async subscribe(channel: string, handler: (message: unknown) => void): Promise<Unsubscribe> {
    const listener = (json: string): void => {
      try {
        handler(JSON.parse(json));
      } catch (err) {
        this.logger?.error({ err, channel }, `subscribe() | handler threw [channel:${channel}]`);
      }
    };
    this.emitter.on(channel, listener);
    return async () => {
      this.emitter.off(channel, listener);
    };
  }

  close(): void {
    this.emitter.removeAllListeners();
  }
}

/**
 * A typed EventEmitter. `safeEmit` logs a listener's exception instead of letting it unwind into
 * the media code that emitted (a bad listener must not break a stream's state machine).
 */
import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';

export type EventMap = Record<string, unknown[]>;

export class TypedEmitter<E extends EventMap> {
  readonly #ee = new EventEmitter();
  readonly #logger: Logger;

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  on<K extends keyof E & string>(event: K, listener: (...args: E[K]) => void): this {
    this.#ee.on(event, listener as (...args: unknown[]) => void);
    return this;
  }

  once<K extends keyof E & string>(event: K, listener: (...args: E[K]) => void): this {
    this.#ee.once(event, listener as (...args: unknown[]) => void);
    return this;
  }

  off<K extends keyof E & string>(event: K, listener: (...args: E[K]) => void): this {
    this.#ee.off(event, listener as (...args: unknown[]) => void);
    return this;
  }

  protected safeEmit<K extends keyof E & string>(event: K, ...args: E[K]): void {
    for (const listener of this.#ee.listeners(event)) {
      try {
        (listener as (...a: E[K]) => void)(...args);
      } catch (err) {
        this.#logger.error({ err, event }, `safeEmit() | listener threw [event:${event}]`);
      }
    }
  }
}

/**
 * `request.log`: a request's logger that makes its child (with the request id bound) only when a
 * line at an enabled level is written. Fastify makes a child logger per request; most requests
 * write no line through it (the access line is written with the id in its fields), so the child
 * was ≈ 2 % of the API's hot path for nothing. Lines come out as the child's would.
 *
 * It is the interface fastify asks of a logger (`FastifyBaseLogger`), which is also the type the
 * app gives `request.log` (control/buildApp.ts), so nothing can call a pino-only method on it.
 */
import type { FastifyBaseLogger } from 'fastify';
import { levels, type Bindings, type ChildLoggerOptions, type Level } from 'pino';

export class RequestLogger implements FastifyBaseLogger {
  readonly #parent: FastifyBaseLogger;
  readonly #bindings: Bindings;
  readonly #options: ChildLoggerOptions;
  #child: FastifyBaseLogger | null = null;

  /** `options` as fastify passes them: a route's `logLevel` and `logSerializers`, if it has any. */
  constructor(parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions = {}) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
  }

  /** The child's level: a route's own `logLevel` when it has one, else the parent's. */
  get level(): string {
    return this.#child?.level ?? this.#options.level ?? this.#parent.level;
  }

  set level(level: string) {
    this.#logger().level = level;
  }

  fatal(...args: unknown[]): void {
    this.#write('fatal', args);
  }

  error(...args: unknown[]): void {
    this.#write('error', args);
  }

  warn(...args: unknown[]): void {
    this.#write('warn', args);
  }

  info(...args: unknown[]): void {
    this.#write('info', args);
  }

  debug(...args: unknown[]): void {
    this.#write('debug', args);
  }

  trace(...args: unknown[]): void {
    this.#write('trace', args);
  }

  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#logger().child(bindings, options);
  }

  #logger(): FastifyBaseLogger {
    return (this.#child ??= this.#parent.child(this.#bindings, this.#options));
  }

  /**
   * Whether `level` would be written, by pino's standard level numbers (we define no custom
   * levels); 'silent', and any name pino does not know, writes nothing.
   */
  #enabled(level: Level): boolean {
    return (levels.values[level] ?? 0) >= (levels.values[this.level] ?? Infinity);
  }

  #write(level: Level, args: unknown[]): void {
    if (!this.#enabled(level)) return;
    const logger = this.#logger();
    Reflect.apply(logger[level], logger, args);
  }
}

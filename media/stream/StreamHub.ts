/**
 * A stream's readers (docs/decisions/0028-stream-hub.md): it makes them, fans the stream's tracks
 * out to them, sums their demand and status, and drops them when they close. It knows no protocol:
 * WHEP, LL-HLS, RTMP and any later output are readers alike (media/StreamReader.ts).
 *
 * A reader that throws while taking a track is logged and reported through the hub's one `error`
 * event; the other readers still get it (one bad output never stops the rest).
 */
import type { Logger } from 'pino';
import type { Frame } from '../Frame.ts';
import type { EncodedAccessUnit } from '../gst/EncoderBin.ts';
import { InvalidStateError } from '../errors.ts';
import type { ReaderContext, ReaderFactory, ReaderStatus, StreamReader } from '../StreamReader.ts';
import { TypedEmitter } from '../TypedEmitter.ts';

export interface StreamHubOptions {
  streamId: string;
  /** What the readers' contexts ask of the stream (see ReaderContext). */
  requestKeyUnit: () => void;
  requestSourceKeyframe: () => void;
  rtpTimestamp: (ptsMs: number) => number;
  changed: () => void;
  logger: Logger;
}

export type StreamHubEvents = {
  /** A reader failed in a way the stream reports (its lastError). */
  error: [string];
};

export class StreamHub extends TypedEmitter<StreamHubEvents> {
  readonly #opts: StreamHubOptions;
  readonly #logger: Logger;
  /** By name, in the order they were added (the status lists them so). */
  readonly #readers = new Map<string, StreamReader>();
  /** The readers' closes (a recording's last segment written): what `ended` waits for. */
  readonly #ends: Promise<void>[] = [];
  #closed = false;

  constructor(opts: StreamHubOptions) {
    super(opts.logger);
    this.#opts = opts;
    this.#logger = opts.logger;
  }

  /** Makes a reader and registers it; throws when the hub is closed or the name is taken. */
  add<R extends StreamReader>(make: ReaderFactory<R>): R {
    if (this.#closed) throw new InvalidStateError(`stream closed [streamId:${this.#opts.streamId}]`);
    const o = this.#opts;
    const ctx: ReaderContext = {
      streamId: o.streamId,
      requestKeyUnit: o.requestKeyUnit,
      requestSourceKeyframe: o.requestSourceKeyframe,
      rtpTimestamp: o.rtpTimestamp,
      changed: () => {
        if (!this.#closed) o.changed();
      },
      error: (message) => this.safeEmit('error', message),
    };
    const reader = make(ctx);
    if (this.#readers.has(reader.name)) {
      void this.#closeOne(reader);
      throw new InvalidStateError(`a reader named ${reader.name} exists [streamId:${o.streamId}]`);
    }
    this.#readers.set(reader.name, reader);
    this.#logger.debug(`add() | reader added [streamId:${o.streamId}] [reader:${reader.name}]`);
    o.changed();
    return reader;
  }

  /** Closes one reader and drops it; false when none has that name. */
  remove(name: string): boolean {
    const reader = this.#readers.get(name);
    if (!reader) return false;
    this.#readers.delete(name);
    this.#ends.push(this.#closeOne(reader));
    this.#opts.changed();
    return true;
  }

  /** The reader of this class (the first, when several are), or null. */
  find<R extends StreamReader>(kind: abstract new (...args: never[]) => R): R | null {
    for (const r of this.#readers.values()) if (r instanceof kind) return r;
    return null;
  }

  get(name: string): StreamReader | null {
    return this.#readers.get(name) ?? null;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Some reader consumes the output now. */
  get watched(): boolean {
    for (const r of this.#readers.values()) if (r.watched) return true;
    return false;
  }

  /** Some reader keeps the stream from idling. */
  get holds(): boolean {
    for (const r of this.#readers.values()) if (r.holds === true) return true;
    return false;
  }

  get wantsAac(): boolean {
    for (const r of this.#readers.values()) if (r.wantsAac === true) return true;
    return false;
  }

  get wantsOpus(): boolean {
    for (const r of this.#readers.values()) if (r.wantsOpus === true) return true;
    return false;
  }

  get wantsRenditions(): boolean {
    for (const r of this.#readers.values()) if (r.wantsRenditions === true) return true;
    return false;
  }

  video(au: EncodedAccessUnit, slate: boolean): void {
    for (const r of this.#readers.values()) if (r.video) this.#guard(r, 'video', () => r.video?.(au, slate));
  }

  rendition(name: string, au: EncodedAccessUnit, slate: boolean): void {
    for (const r of this.#readers.values()) if (r.rendition) this.#guard(r, 'rendition', () => r.rendition?.(name, au, slate));
  }

  frame(frame: Frame, ptsMs: number): void {
    for (const r of this.#readers.values()) if (r.frame) this.#guard(r, 'frame', () => r.frame?.(frame, ptsMs));
  }

  opus(rtp: Buffer, encoderDelayMs: number): void {
    for (const r of this.#readers.values()) if (r.opus) this.#guard(r, 'opus', () => r.opus?.(rtp, encoderDelayMs));
  }

  aac(frame: Uint8Array, atMs: number): void {
    for (const r of this.#readers.values()) if (r.aac) this.#guard(r, 'aac', () => r.aac?.(frame, atMs));
  }

  aacRunning(running: boolean): void {
    for (const r of this.#readers.values()) if (r.aacRunning) this.#guard(r, 'aacRunning', () => r.aacRunning?.(running));
  }

  publisherAttached(): void {
    for (const r of this.#readers.values()) if (r.publisherAttached) this.#guard(r, 'publisherAttached', () => r.publisherAttached?.());
  }

  publisherLeft(watched: boolean): void {
    for (const r of this.#readers.values()) if (r.publisherLeft) this.#guard(r, 'publisherLeft', () => r.publisherLeft?.(watched));
  }

  /** Each reader's status by name, in the order they were added. */
  status(): Record<string, ReaderStatus> {
    const out: Record<string, ReaderStatus> = {};
    for (const [name, r] of this.#readers) out[name] = r.status();
    return out;
  }

  #guard(r: StreamReader, track: string, take: () => void): void {
    try {
      take();
    } catch (err) {
      this.#logger.error({ err }, `${track}() | reader failed [streamId:${this.#opts.streamId}] [reader:${r.name}]`);
      this.safeEmit('error', `${r.name}: ${(err as Error).message}`);
    }
  }

  async #closeOne(r: StreamReader): Promise<void> {
    try {
      await r.close();
    } catch (err) {
      this.#logger.warn({ err }, `close() | reader close failed [streamId:${this.#opts.streamId}] [reader:${r.name}]`);
    }
  }

  /** Closes every reader (in the order added). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const r of this.#readers.values()) this.#ends.push(this.#closeOne(r));
    this.#readers.clear();
  }

  /** Settles once every reader closed so far finished closing (a recording fully on disk). */
  ended(): Promise<void> {
    return Promise.all(this.#ends).then(() => undefined);
  }
}

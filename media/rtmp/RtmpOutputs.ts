/**
 * A stream's RTMP destinations: the spec's `output_rtmp_url` and up to `MAX_RTMP_DESTINATIONS`
 * more, each an RtmpPush fed from the stream's one encode (no encode per destination: each costs
 * one ffmpeg remux process, ≈ 1–2 % of a core). A destination is enabled or disabled live; pushes
 * run only while a publisher is attached (`start`/`stop`), and each keeps its own reconnect state.
 * Changing the list reconciles: an unchanged destination keeps its connection.
 *
 * A reader of the stream's hub (media/StreamReader.ts): it takes the stream's H.264 access units
 * (or a rendition's, for a destination that names one: a thinner uplink to a platform) and AAC; pushes start with the first publisher and keep their connections across publishers
 * (they carry the slate between them, decision 0011) until the stream closes.
 */
import type { Logger } from 'pino';
import type { EncodedAccessUnit } from '../gst/EncoderBin.ts';
import type { ReaderContext, ReaderStatus, StreamReader } from '../StreamReader.ts';
import type { OutboundPolicy } from './RtmpRelay.ts';
import { RtmpPush, redactRtmpUrl, type RtmpPushStatus } from './RtmpPush.ts';

/** Destinations besides `output_rtmp_url`. */
export const MAX_RTMP_DESTINATIONS = 4;

/** The name of the spec's own RTMP destination (output_rtmp_url) among a stream's destinations. */
export const PRIMARY_RTMP = 'output_rtmp_url';

export interface RtmpDestination {
  /** Unique per stream (`output_rtmp_url` names the spec's own destination). */
  name: string;
  url: string;
  enabled: boolean;
  /** A rendition of the output to push (settings `renditions`); absent: the full encode. */
  rendition?: string | undefined;
}

export interface RtmpDestinationStatus {
  name: string;
  /** The target with its stream key replaced by `…`. */
  url: string;
  enabled: boolean;
  /** The rendition it pushes; absent: the full encode. */
  rendition?: string;
  /** Null while disabled or without a publisher. */
  push: RtmpPushStatus | null;
}

export interface RtmpOutputsOptions {
  policy?: OutboundPolicy;
  ffmpegPath: string;
  logger: Logger;
}

interface Slot {
  dest: RtmpDestination;
  push: RtmpPush | null;
}

export class RtmpOutputs implements StreamReader {
  readonly name = 'rtmp';
  readonly #ctx: ReaderContext;
  readonly #opts: RtmpOutputsOptions;
  #slots = new Map<string, Slot>();
  #running = false;
  /** The spec's output_rtmp_url and the stream's other destinations, as last set. */
  #primary: string | undefined;
  #extra: RtmpDestination[] = [];

  constructor(ctx: ReaderContext, opts: RtmpOutputsOptions) {
    this.#ctx = ctx;
    this.#opts = opts;
  }

  /** Sets (or clears) output_rtmp_url. */
  setPrimary(url: string | undefined): void {
    if (url === this.#primary) return;
    this.#primary = url;
    this.#apply();
  }

  /** Sets the stream's other destinations (each enabled or not); one named PRIMARY_RTMP is ignored. */
  setDestinations(dests: readonly RtmpDestination[]): void {
    this.#extra = dests.filter((d) => d.name !== PRIMARY_RTMP).map((d) => ({ ...d }));
    this.#apply();
  }

  #apply(): void {
    this.set([...(this.#primary ? [{ name: PRIMARY_RTMP, url: this.#primary, enabled: true }] : []), ...this.#extra]);
  }

  /** Replaces the list; unchanged destinations keep their pushes, the rest start or stop now. */
  set(dests: readonly RtmpDestination[]): void {
    const next = new Map<string, Slot>();
    for (const dest of dests) {
      const old = this.#slots.get(dest.name);
      if (old && old.dest.url === dest.url && old.dest.enabled === dest.enabled && old.dest.rendition === dest.rendition) {
        next.set(dest.name, old);
        continue;
      }
      old?.push?.close();
      next.set(dest.name, { dest: { ...dest }, push: null });
    }
    for (const [name, slot] of this.#slots) if (!next.has(name)) slot.push?.close();
    this.#slots = next;
    if (this.#running) this.start();
    this.#ctx.changed();
  }

  /** The destinations as set (URLs unredacted: the node's own view). */
  get destinations(): RtmpDestination[] {
    return [...this.#slots.values()].map((s) => ({ ...s.dest }));
  }

  /** A publisher is attached: every enabled destination pushes. */
  start(): void {
    this.#running = true;
    for (const slot of this.#slots.values()) {
      if (!slot.dest.enabled || slot.push) continue;
      slot.push = new RtmpPush({
        url: slot.dest.url,
        ...(this.#opts.policy ? { policy: this.#opts.policy } : {}),
        ffmpegPath: this.#opts.ffmpegPath,
        logger: this.#opts.logger,
        requestKeyUnit: () => this.#ctx.requestKeyUnit(),
      });
    }
  }

  /** A publisher attached: every enabled destination pushes (those already pushing keep their connections). */
  publisherAttached(): void {
    this.start();
    this.#ctx.changed();
  }

  /** Every push stops (they start again with the next `start`). */
  stop(): void {
    this.#running = false;
    for (const slot of this.#slots.values()) {
      slot.push?.close();
      slot.push = null;
    }
  }

  /** Pushes running now. */
  get #pushing(): number {
    let n = 0;
    for (const slot of this.#slots.values()) if (slot.push) n++;
    return n;
  }

  /** Some push is running: it consumes the output (the slate runs for it) and takes AAC. */
  get watched(): boolean {
    return this.#pushing > 0;
  }

  get wantsAac(): boolean {
    return this.#pushing > 0;
  }

  /** Some destination pushes a rendition: the stream encodes its renditions. */
  get wantsRenditions(): boolean {
    for (const slot of this.#slots.values()) if (slot.push && slot.dest.rendition !== undefined) return true;
    return false;
  }

  video(au: EncodedAccessUnit): void {
    for (const slot of this.#slots.values()) if (slot.dest.rendition === undefined) slot.push?.pushVideo(au);
  }

  rendition(name: string, au: EncodedAccessUnit): void {
    for (const slot of this.#slots.values()) if (slot.dest.rendition === name) slot.push?.pushVideo(au);
  }

  aac(frame: Uint8Array, atMs: number): void {
    for (const slot of this.#slots.values()) slot.push?.pushAudio(frame, atMs);
  }

  status(): ReaderStatus {
    const pushing = this.#pushing;
    return { kind: 'rtmp', watched: pushing > 0, consumers: pushing };
  }

  /** Every destination (output_rtmp_url first, named so) with its push state. */
  outputs(): RtmpDestinationStatus[] {
    return [...this.#slots.values()].map((s) => ({
      name: s.dest.name,
      url: redactRtmpUrl(s.dest.url),
      enabled: s.dest.enabled,
      ...(s.dest.rendition !== undefined ? { rendition: s.dest.rendition } : {}),
      push: s.push?.status() ?? null,
    }));
  }

  /** The push of one destination (status of the spec's own one). */
  pushStatus(name: string): RtmpPushStatus | null {
    return this.#slots.get(name)?.push?.status() ?? null;
  }

  close(): void {
    this.stop();
  }
}

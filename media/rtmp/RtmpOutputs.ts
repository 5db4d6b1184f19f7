/**
 * A stream's RTMP destinations: the spec's `output_rtmp_url` and up to `MAX_RTMP_DESTINATIONS`
 * more, each an RtmpPush fed from the stream's one encode (no encode per destination: each costs
 * one ffmpeg remux process, ≈ 1–2 % of a core). A destination is enabled or disabled live; pushes
 * run only while a publisher is attached (`start`/`stop`), and each keeps its own reconnect state.
 * Changing the list reconciles: an unchanged destination keeps its connection.
 */
import type { Logger } from 'pino';
import type { OutboundPolicy } from './RtmpRelay.ts';
import { RtmpPush, redactRtmpUrl, type RtmpPushStatus } from './RtmpPush.ts';

/** Destinations besides `output_rtmp_url`. */
export const MAX_RTMP_DESTINATIONS = 4;

export interface RtmpDestination {
  /** Unique per stream (`output_rtmp_url` names the spec's own destination). */
  name: string;
  url: string;
  enabled: boolean;
}

export interface RtmpDestinationStatus {
  name: string;
  /** The target with its stream key replaced by `…`. */
  url: string;
  enabled: boolean;
  /** Null while disabled or without a publisher. */
  push: RtmpPushStatus | null;
}

export interface RtmpOutputsOptions {
  policy?: OutboundPolicy;
  ffmpegPath: string;
  logger: Logger;
  requestKeyUnit: () => void;
}

interface Slot {
  dest: RtmpDestination;
  push: RtmpPush | null;
}

export class RtmpOutputs {
  readonly #opts: RtmpOutputsOptions;
  #slots = new Map<string, Slot>();
  #running = false;

  constructor(opts: RtmpOutputsOptions) {
    this.#opts = opts;
  }

  /** Replaces the list; unchanged destinations keep their pushes, the rest start or stop now. */
  set(dests: readonly RtmpDestination[]): void {
    const next = new Map<string, Slot>();
    for (const dest of dests) {
      const old = this.#slots.get(dest.name);
      if (old && old.dest.url === dest.url && old.dest.enabled === dest.enabled) {
        next.set(dest.name, old);
        continue;
      }
      old?.push?.close();
      next.set(dest.name, { dest: { ...dest }, push: null });
    }
    for (const [name, slot] of this.#slots) if (!next.has(name)) slot.push?.close();
    this.#slots = next;
    if (this.#running) this.start();
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
        requestKeyUnit: this.#opts.requestKeyUnit,
      });
    }
  }

  /** The publisher left: every push stops (they start again with the next publisher). */
  stop(): void {
    this.#running = false;
    for (const slot of this.#slots.values()) {
      slot.push?.close();
      slot.push = null;
    }
  }

  /** Some push is running (the AAC encoder is needed). */
  get active(): boolean {
    for (const slot of this.#slots.values()) if (slot.push) return true;
    return false;
  }

  pushVideo(au: { nals: Uint8Array[]; keyframe: boolean; ptsMs: number }): void {
    for (const slot of this.#slots.values()) slot.push?.pushVideo(au);
  }

  pushAudio(frame: Uint8Array, atMs: number): void {
    for (const slot of this.#slots.values()) slot.push?.pushAudio(frame, atMs);
  }

  status(): RtmpDestinationStatus[] {
    return [...this.#slots.values()].map((s) => ({ name: s.dest.name, url: redactRtmpUrl(s.dest.url), enabled: s.dest.enabled, push: s.push?.status() ?? null }));
  }

  /** The push of one destination (status of the spec's own one). */
  pushStatus(name: string): RtmpPushStatus | null {
    return this.#slots.get(name)?.push?.status() ?? null;
  }
}

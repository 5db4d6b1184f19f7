/**
 * The processor plugin contract. A processor is created from validated params and applied once per
 * frame; stateful ones (feedback) keep their state until `reset()` (called on pipeline reload and
 * whenever the chain is rebuilt).
 */
import type { z } from 'zod';
import type { Frame, LatentTensor } from '../Frame.ts';

/** Which chain a processor belongs to: 'image' = RGB frames, 'latent' = VAE latents. */
export type ProcessorKind = 'image' | 'latent';

export interface ImageProcessor {
  readonly type: string;
  /** Returns a new frame or `frame` itself (passthrough); never mutates the input. */
  process(frame: Frame): Frame;
  /** The final pipeline output of the last frame, for processors that feed it back. */
  observeOutput?(frame: Frame): void;
  reset(): void;
}

export interface LatentProcessor {
  readonly type: string;
  /** Returns a new tensor or `latent` itself; never mutates the input. */
  process(latent: LatentTensor): LatentTensor;
  reset(): void;
}

export interface ProcessorFor {
  image: ImageProcessor;
  latent: LatentProcessor;
}

/** A processor type: its name, chain kind, param schema (zod; unknown keys are stripped) and factory. */
export interface ProcessorDefinition<K extends ProcessorKind = ProcessorKind, P = unknown> {
  readonly type: string;
  readonly kind: K;
  readonly params: z.ZodType<P>;
  create(params: P): ProcessorFor[K];
}

/** Keeps the typed link between a definition's schema and its factory. */
export function defineProcessor<K extends ProcessorKind, P>(def: ProcessorDefinition<K, P>): ProcessorDefinition<K, P> {
  return def;
}

/**
 * The processor registry and chain factory. `createProcessorChain` validates a Daydream processing
 * block (`image_preprocessing`, `image_postprocessing`, `latent_preprocessing`,
 * `latent_postprocessing`) once and returns an object applying the enabled processors in order.
 */
import { z } from 'zod';
import type { Frame, LatentTensor } from '../Frame.ts';
import { InvalidProcessorParamsError, UnsupportedProcessorError } from '../errors.ts';
import { blur } from './Blur.ts';
import { canny } from './Canny.ts';
import { feedback } from './Feedback.ts';
import { latentFeedback } from './LatentFeedback.ts';
import { passthroughImage } from './Passthrough.ts';
import type { ImageProcessor, LatentProcessor, ProcessorDefinition, ProcessorKind } from './Processor.ts';
import { sharpen } from './Sharpen.ts';
import { upscale } from './Upscale.ts';

// The casts erase each definition's own param type; `create` only ever receives what its own
// schema produced.
const IMAGE_DEFS = [passthroughImage, blur, sharpen, canny, feedback, upscale] as unknown as ProcessorDefinition<'image'>[];
const LATENT_DEFS = [latentFeedback] as unknown as ProcessorDefinition<'latent'>[];

/** Image processor types this engine implements (a subset of Daydream's ImageProcessorName). */
export const IMAGE_PROCESSOR_TYPES: readonly string[] = Object.freeze(IMAGE_DEFS.map((d) => d.type));
/** Latent processor types this engine implements (Daydream's LatentProcessorsName). */
export const LATENT_PROCESSOR_TYPES: readonly string[] = Object.freeze(LATENT_DEFS.map((d) => d.type));

/**
 * The JSON Schema of each processor's `params` (what `GET /v1/capabilities` shows, so clients build
 * controls from it), by chain kind and type. Defaults and bounds are the processors' own.
 */
export function processorParamSchemas(kind: ProcessorKind): Record<string, unknown> {
  const defs: ProcessorDefinition[] = kind === 'image' ? IMAGE_DEFS : LATENT_DEFS;
  return Object.fromEntries(defs.map((d) => [d.type, z.toJSONSchema(d.params, { io: 'input', unrepresentable: 'any' })]));
}

/** One entry of a processing block, as in the Daydream schema. */
export interface ProcessorConfig {
  type: string;
  /** Default true. */
  enabled?: boolean;
  params?: Record<string, unknown>;
}

/** A Daydream processing block; `undefined`/`null` = no processing. */
export interface ProcessingBlock {
  /** Default true; false disables the whole block. */
  enabled?: boolean;
  processors: ProcessorConfig[];
}

export interface ProcessorChain<T> {
  /** Types of the processors that actually run, in order. */
  readonly types: readonly string[];
  /** True when the chain does nothing (no enabled processors). */
  readonly empty: boolean;
  apply(input: T): T;
  /** Feeds the final pipeline output back to processors that use it (image `feedback`). */
  observeOutput(output: T): void;
  /** Clears processor state (previous frames). */
  reset(): void;
}

export function createProcessorChain(block: ProcessingBlock | null | undefined, kind: 'image'): ProcessorChain<Frame>;
export function createProcessorChain(block: ProcessingBlock | null | undefined, kind: 'latent'): ProcessorChain<LatentTensor>;
export function createProcessorChain(
  block: ProcessingBlock | null | undefined,
  kind: ProcessorKind,
): ProcessorChain<Frame> | ProcessorChain<LatentTensor> {
  const defs: ProcessorDefinition[] = kind === 'image' ? IMAGE_DEFS : LATENT_DEFS;
  const supported = kind === 'image' ? IMAGE_PROCESSOR_TYPES : LATENT_PROCESSOR_TYPES;
  const configs = block?.processors ?? [];
  const procs: (ImageProcessor | LatentProcessor)[] = [];
  // Validate every entry, even disabled ones, so a bad config is rejected when it is sent, not
  // later when someone flips `enabled`.
  for (const cfg of configs) {
    const def = defs.find((d) => d.type === cfg.type);
    if (!def) throw new UnsupportedProcessorError(String(cfg.type), kind, supported);
    const parsed = def.params.safeParse(cfg.params ?? {});
    if (!parsed.success) {
      const detail = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new InvalidProcessorParamsError(cfg.type, detail, { cause: parsed.error });
    }
    const proc = def.create(parsed.data);
    if (cfg.enabled !== false) procs.push(proc);
  }
  const active = block?.enabled === false ? [] : procs;
  const types = Object.freeze(active.map((p) => p.type));
  if (kind === 'image') {
    const image = active as ImageProcessor[];
    return {
      types,
      empty: image.length === 0,
      apply: (f: Frame) => image.reduce((acc, p) => p.process(acc), f),
      observeOutput: (f: Frame) => {
        for (const p of image) p.observeOutput?.(f);
      },
      reset: () => {
        for (const p of image) p.reset();
      },
    };
  }
  const latent = active as LatentProcessor[];
  return {
    types,
    empty: latent.length === 0,
    apply: (x: LatentTensor) => latent.reduce((acc, p) => p.process(acc), x),
    observeOutput: () => {},
    reset: () => {
      for (const p of latent) p.reset();
    },
  };
}

/**
 * What this deployment can do, for clients that build their controls from it (a show controller,
 * a TouchDesigner component, the playground): the models the media nodes serve now (real or demo),
 * per model its ControlNets and IP-Adapter types, the ControlNet preprocessors and the image/latent
 * processors with the JSON Schema of their params, which params are hot, and the live-control
 * channel's limits. Read from the same tables the validation uses, so it cannot drift from them.
 */
import { z } from 'zod';
import {
  CONTROLNET_PREPROCESSORS as ENGINE_PREPROCESSORS,
  HOT_KEYS,
  IMAGE_PROCESSOR_TYPES,
  LATENT_PROCESSOR_TYPES,
  PREPROCESSOR_PARAMS,
  processorParamSchemas,
  runnableControlNetsFor,
} from '../native/params/index.ts';
import type { MediaNodeInfo } from './MediaNodeClient.ts';
import { MODEL_IDS, MODELS, type ModelId } from './StreamParams.ts';
import { CONTROL_LIMITS } from './StreamControl.ts';
import { UPDATE_RATE } from './StreamService.ts';

/**
 * IP-Adapter types by family: `regular` wherever an IP-Adapter runs; `faceid` on SDXL only, and
 * only through the beta prompt route's `streamdiffusion-sdxl-faceid` pipeline.
 */
const IP_ADAPTER_TYPES = { sd21: [], sd15: ['regular'], sdxl: ['regular', 'faceid'] } as const;

export const CapabilitiesSchema = z
  .object({
    models: z.array(
      z.object({
        model_id: z.enum(MODEL_IDS),
        family: z.enum(['sd21', 'sd15', 'sdxl']),
        demo: z.boolean().describe('Served by tiny random-weight stand-ins (the pictures mean nothing); false = real weights'),
        nodes: z.number().int().describe('Media nodes serving it now'),
        free_slots: z.number().int().describe('Streams those nodes can still take'),
        controlnets: z.array(z.string()).describe('ControlNet model_ids this model runs'),
        ip_adapter: z.object({ supported: z.boolean(), types: z.array(z.enum(['regular', 'faceid'])) }),
        cached_attention: z.boolean(),
      }),
    ),
    preprocessors: z.array(z.object({ name: z.string(), params_schema: z.record(z.string(), z.unknown()) })).describe('ControlNet preprocessors and the JSON Schema of their preprocessor_params'),
    processors: z.object({
      image: z.array(z.object({ type: z.string(), params_schema: z.record(z.string(), z.unknown()) })),
      latent: z.array(z.object({ type: z.string(), params_schema: z.record(z.string(), z.unknown()) })),
    }),
    hot_params: z.array(z.string()).describe('Params applied on the next frame; any other change reloads the pipeline'),
    hot_rules: z.array(z.string()).describe('Exceptions to hot_params, in words'),
    control: z.object({
      websocket: z.string().describe('Path of the per-stream WebSocket ({id} = stream id)'),
      token_ttl_seconds: z.number().int(),
      update_rate: z.object({ max: z.number().int(), window_seconds: z.number() }),
      transition_interpolation: z.array(z.enum(['linear', 'slerp'])),
      max_transition_steps: z.number().int(),
      max_schedule_ahead_seconds: z.number(),
      max_scheduled_per_stream: z.number().int(),
    }),
  })
  .meta({ id: 'Capabilities' });
export type Capabilities = z.infer<typeof CapabilitiesSchema>;

/** Builds the capabilities document from the nodes live now. */
export function describeCapabilities(nodes: readonly MediaNodeInfo[], updateRate: { max: number; windowMs: number } = UPDATE_RATE): Capabilities {
  const models = MODEL_IDS.flatMap((id: ModelId) => {
    const serving = nodes.filter((n) => n.models.includes(id));
    if (serving.length === 0) return [];
    const info = MODELS[id];
    return [
      {
        model_id: id,
        family: info.family,
        // A model counts as real only when every node serving it has real weights.
        demo: serving.some((n) => n.demo),
        nodes: serving.length,
        free_slots: serving.reduce((sum, n) => sum + Math.max(0, n.capacity - n.load), 0),
        controlnets: runnableControlNetsFor(id),
        ip_adapter: { supported: info.ipAdapter, types: [...IP_ADAPTER_TYPES[info.family]] },
        cached_attention: info.cachedAttention,
      },
    ];
  });
  const image = processorParamSchemas('image');
  const latent = processorParamSchemas('latent');
  const modelPre = PREPROCESSOR_PARAMS as Record<string, z.ZodType>;
  const preprocessors = ENGINE_PREPROCESSORS.map((name) => ({
    name,
    params_schema: (modelPre[name] ? z.toJSONSchema(modelPre[name], { io: 'input', unrepresentable: 'any' }) : (image[name] ?? {})) as Record<string, unknown>,
  }));
  return {
    models,
    preprocessors,
    processors: {
      image: IMAGE_PROCESSOR_TYPES.map((type) => ({ type, params_schema: (image[type] ?? {}) as Record<string, unknown> })),
      latent: LATENT_PROCESSOR_TYPES.map((type) => ({ type, params_schema: (latent[type] ?? {}) as Record<string, unknown> })),
    },
    hot_params: [...HOT_KEYS].sort(),
    hot_rules: [
      'controlnets: only conditioning_scale and preprocessor_params changes on the same list are hot; adding, removing or changing a model_id or preprocessor reloads',
      'image_postprocessing: a change of the output scale (upscale) reloads',
      'ip_adapter: hot whatever changes, adding and removing it included',
    ],
    control: {
      websocket: '/v1/streams/{id}/control',
      token_ttl_seconds: CONTROL_LIMITS.tokenTtlSeconds,
      update_rate: { max: updateRate.max, window_seconds: updateRate.windowMs / 1000 },
      transition_interpolation: ['linear', 'slerp'],
      max_transition_steps: CONTROL_LIMITS.maxTransitionSteps,
      max_schedule_ahead_seconds: CONTROL_LIMITS.maxAheadMs / 1000,
      max_scheduled_per_stream: CONTROL_LIMITS.maxScheduled,
    },
  };
}

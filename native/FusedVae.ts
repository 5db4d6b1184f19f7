/**
 * Moves the pixel-format conversions and the latent scaling into the VAE graphs, so the frame
 * path hands ONNX Runtime the decoder's RGB24 bytes and gets RGB24 bytes back:
 *
 *   encoder: rgb uint8 [B,H,W,3] → ÷127.5 − 1 → NCHW → VAE encoder → (mean half) → × scaling_factor → latent
 *   decoder: latent → ÷ scaling_factor → VAE decoder → ×127.5 + 128 → clamp [0,255] → NHWC → uint8 rgb
 *
 * Why: these were two JavaScript passes over 786k values per frame at 512² (2–4 ms each on the
 * dev VM, a third of the frame's non-ORT time) plus a 3 MB float32 buffer per frame for the
 * garbage collector. In the graph they run on the execution provider (device kernels on CUDA /
 * TensorRT), and host↔device traffic is uint8 instead of float32 (4× less). On this CPU the ORT
 * kernels cost about what the JS loops cost (3.0 vs 2.3 ms measured side by side), so here the
 * win is the freed JS thread and the garbage, not raw speed.
 *
 * Rounding equals the JS converters it replaces: float→uint8 `Cast` truncates, like a Uint8Array
 * store, after the clamp (trunc(x·127.5 + 128) = round-half-up of (x+1)·127.5).
 *
 * Only default-domain ops that mean the same from opset 11 on are added (Cast, Transpose, Mul,
 * Sub, Add, Clip, Shape, Gather, Div, Slice), so any SD/SDXL/TAESD export (opset 14+) takes them.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { onnx as OnnxNs } from 'onnx-proto';
import { ModelLoadError } from './errors.ts';
import { attribute, DT, onnx, valueInfo, type AttrValue } from './OnnxGraph.ts';

/** Names of the fused graphs' inputs and outputs. */
export const FUSED_IO = { rgb: 'rgb', latent: 'latent' } as const;

/** ONNX TensorProto.DataLocation.EXTERNAL. */
const EXTERNAL = 1;

/**
 * Reads a model with any external weight data inlined. VAE parts are far below protobuf's 2 GB
 * limit, so one buffer holds them (UNets above it are never fused).
 */
export function readModel(file: string): OnnxNs.ModelProto {
  const model = onnx.ModelProto.decode(readFileSync(file));
  const files = new Map<string, Buffer>();
  for (const t of model.graph?.initializer ?? []) {
    if (t.dataLocation !== EXTERNAL) continue;
    const kv = Object.fromEntries((t.externalData ?? []).map((e) => [e.key, e.value]));
    const location = kv.location;
    if (!location) throw new ModelLoadError(dirname(file), `initializer ${t.name} has external data without a location`);
    let data = files.get(location);
    if (!data) files.set(location, (data = readFileSync(join(dirname(file), location))));
    const offset = Number(kv.offset ?? 0);
    const length = kv.length !== undefined ? Number(kv.length) : data.length - offset;
    t.rawData = data.subarray(offset, offset + length);
    t.externalData = [];
    t.dataLocation = 0;
  }
  return model;
}

/** Appends nodes and float32 scalars to a graph under a reserved name prefix. */
class GraphEdit {
  readonly #g: OnnxNs.IGraphProto;
  #n = 0;

  constructor(model: OnnxNs.ModelProto) {
    if (!model.graph) throw new ModelLoadError('', 'model has no graph');
    this.#g = model.graph;
  }

  get graph(): OnnxNs.IGraphProto {
    return this.#g;
  }

  name(hint: string): string {
    return `reverie_io_${hint}_${this.#n++}`;
  }

  scalar(value: number): string {
    const name = this.name('k');
    (this.#g.initializer ??= []).push({ name, dims: [], dataType: DT.float32, rawData: new Uint8Array(Float32Array.of(value).buffer) });
    return name;
  }

  ints(values: number[]): string {
    const name = this.name('i');
    (this.#g.initializer ??= []).push({ name, dims: [values.length], dataType: DT.int64, rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) });
    return name;
  }

  /** A node whose output is `output` (or a fresh name); returns the output name. */
  op(opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, output?: string): OnnxNs.INodeProto & { out: string } {
    const out = output ?? this.name(opType.toLowerCase());
    const node = { opType, input: inputs, output: [out], name: this.name(opType), attribute: Object.entries(attrs).map(([k, v]) => attribute(k, v)) };
    return Object.assign(node, { out });
  }

  /** Replaces the graph input `name` with `replacement`; the old name becomes an internal tensor. */
  replaceInput(name: string, replacement: OnnxNs.IValueInfoProto): void {
    const inputs = this.#g.input ?? [];
    const i = inputs.findIndex((x) => x.name === name);
    if (i < 0) throw new ModelLoadError('', `graph has no input '${name}' (has ${inputs.map((x) => x.name).join(', ')})`);
    inputs.splice(i, 1, replacement);
  }

  prepend(nodes: OnnxNs.INodeProto[]): void {
    this.#g.node = [...nodes, ...(this.#g.node ?? [])];
  }

  append(nodes: OnnxNs.INodeProto[]): void {
    this.#g.node = [...(this.#g.node ?? []), ...nodes];
  }

  setOutputs(outputs: OnnxNs.IValueInfoProto[]): void {
    this.#g.output = outputs;
  }
}

/**
 * Fused VAE encoder: input `rgb` uint8 [B,H,W,3] → output `latent` float32 [B,C,h,w], already
 * multiplied by `scalingFactor`. `latentOut` is the export's output: `latent_sample`, or
 * `latent_parameters` (mean‖logvar along channels, whose mean half is kept).
 */
export function fuseVaeEncoder(model: OnnxNs.ModelProto, o: { scalingFactor: number; latentOut: 'latent_sample' | 'latent_parameters' }): Uint8Array {
  const e = new GraphEdit(model);
  e.replaceInput('sample', valueInfo(FUSED_IO.rgb, 'uint8', ['batch', 'height', 'width', 3]));
  // Cast before Transpose: ORT's uint8 transpose is the slow one (8.7 against 3.9 ms at 512²).
  const f = e.op('Cast', [FUSED_IO.rgb], { to: DT.float32 });
  const nchw = e.op('Transpose', [f.out], { perm: [0, 3, 1, 2] });
  const unit = e.op('Mul', [nchw.out, e.scalar(1 / 127.5)]);
  const sample = e.op('Sub', [unit.out, e.scalar(1)], {}, 'sample');
  e.prepend([f, nchw, unit, sample]);

  const tail: OnnxNs.INodeProto[] = [];
  let latent = o.latentOut as string;
  if (o.latentOut === 'latent_parameters') {
    // Channels C·2 → the first C (the mean), sized at run time from the tensor's shape.
    const shape = e.op('Shape', [latent]);
    const c2 = e.op('Gather', [shape.out, e.ints([1])], { axis: 0 });
    const c = e.op('Div', [c2.out, e.ints([2])]);
    const mean = e.op('Slice', [latent, e.ints([0]), c.out, e.ints([1])]);
    tail.push(shape, c2, c, mean);
    latent = mean.out;
  }
  tail.push(e.op('Mul', [latent, e.scalar(o.scalingFactor)], {}, FUSED_IO.latent));
  e.append(tail);
  e.setOutputs([valueInfo(FUSED_IO.latent, 'float32', ['batch', 'channels', 'latent_height', 'latent_width'])]);
  return onnx.ModelProto.encode(model).finish();
}

/**
 * Fused VAE decoder: input `latent` float32 [B,C,h,w] (scaled, as the UNet sees it) → output
 * `rgb` uint8 [B,H,W,3].
 */
export function fuseVaeDecoder(model: OnnxNs.ModelProto, o: { scalingFactor: number }): Uint8Array {
  const e = new GraphEdit(model);
  e.replaceInput('latent_sample', valueInfo(FUSED_IO.latent, 'float32', ['batch', 'channels', 'latent_height', 'latent_width']));
  e.prepend([e.op('Mul', [FUSED_IO.latent, e.scalar(1 / o.scalingFactor)], {}, 'latent_sample')]);
  const outs = e.graph.output ?? [];
  if (!outs.some((x) => x.name === 'sample')) throw new ModelLoadError('', `vae_decoder has no output 'sample' (has ${outs.map((x) => x.name).join(', ')})`);
  const k = e.op('Mul', ['sample', e.scalar(127.5)]);
  const shifted = e.op('Add', [k.out, e.scalar(128)]);
  const clamped = e.op('Clip', [shifted.out, e.scalar(0), e.scalar(255)]);
  // Cast before Transpose: measured 2.5 ms against 3.7 ms the other way round at 512² on CPU.
  const bytes = e.op('Cast', [clamped.out], { to: DT.uint8 });
  const rgb = e.op('Transpose', [bytes.out], { perm: [0, 2, 3, 1] }, FUSED_IO.rgb);
  e.append([k, shifted, clamped, bytes, rgb]);
  e.setOutputs([valueInfo(FUSED_IO.rgb, 'uint8', ['batch', 'height', 'width', 3])]);
  return onnx.ModelProto.encode(model).finish();
}

/** Output names of a model's graph (to learn what the VAE encoder export returns). */
export function outputNames(model: OnnxNs.ModelProto): string[] {
  return (model.graph?.output ?? []).map((x) => x.name ?? '');
}

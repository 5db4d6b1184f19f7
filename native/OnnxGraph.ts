/**
 * A minimal ONNX graph writer over the `onnx-proto` protobufjs namespace: initializers as raw
 * little-endian data, nodes with typed attributes, inputs/outputs with static or symbolic dims.
 * Opset 17 (LayerNormalization; Reduce* axes still attributes). The tiny-model builder writes
 * whole graphs with it; FusedVae uses the exported helpers to edit real models.
 */
import { createRequire } from 'node:module';
import type { onnx as OnnxNs } from 'onnx-proto';

// onnx-proto is CommonJS; load it with createRequire so ESM named-export detection does not matter.
const require = createRequire(import.meta.url);
export const { onnx } = require('onnx-proto') as { onnx: typeof OnnxNs };

export const OPSET = 17;

/** Element types we write. */
export type ElemType = 'float32' | 'int32' | 'int64' | 'uint8';

export const DT: Record<ElemType, number> = { float32: 1, uint8: 2, int32: 6, int64: 7 };

export type AttrValue = number | number[] | string | { int: number } | { ints: number[] };

export class OnnxGraph {
  readonly #nodes: OnnxNs.INodeProto[] = [];
  readonly #inits: OnnxNs.ITensorProto[] = [];
  readonly #inputs: OnnxNs.IValueInfoProto[] = [];
  readonly #outputs: OnnxNs.IValueInfoProto[] = [];
  #n = 0;

  constructor(readonly name: string) {}

  input(name: string, type: ElemType, dims: (number | string)[]): string {
    this.#inputs.push(valueInfo(name, type, dims));
    return name;
  }

  output(name: string, type: ElemType, dims: (number | string)[]): void {
    this.#outputs.push(valueInfo(name, type, dims));
  }

  /** A float32 initializer; returns its name. */
  f32(name: string, dims: number[], data: ArrayLike<number>): string {
    const arr = Float32Array.from(data);
    if (arr.length !== dims.reduce((a, b) => a * b, 1)) throw new RangeError(`initializer ${name}: size mismatch`);
    this.#inits.push({ name, dims, dataType: DT.float32, rawData: new Uint8Array(arr.buffer) });
    return name;
  }

  /** An int64 initializer; returns its name. */
  i64(name: string, dims: number[], data: readonly number[]): string {
    const arr = BigInt64Array.from(data.map((v) => BigInt(v)));
    this.#inits.push({ name, dims, dataType: DT.int64, rawData: new Uint8Array(arr.buffer) });
    return name;
  }

  /** Adds a node; returns its output names (auto-named unless given). */
  op(opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, outputs?: string[] | number): string[] {
    const outs =
      Array.isArray(outputs) ? outputs : Array.from({ length: outputs ?? 1 }, () => `${opType.toLowerCase()}_${this.#n++}`);
    this.#nodes.push({
      opType,
      input: inputs,
      output: outs,
      name: `${opType}_${this.#n++}`,
      attribute: Object.entries(attrs).map(([name, v]) => attribute(name, v)),
    });
    return outs;
  }

  /** Single-output convenience. */
  op1(opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, output?: string): string {
    return this.op(opType, inputs, attrs, output ? [output] : 1)[0] as string;
  }

  /** Serialises a ModelProto. `meta` lands in metadata_props (visible to ORT's modelMetadata). */
  encode(meta: Record<string, string> = {}): Uint8Array {
    const model = onnx.ModelProto.create({
      irVersion: 8,
      producerName: 'reverie-tiny',
      producerVersion: '1',
      opsetImport: [{ domain: '', version: OPSET }],
      metadataProps: Object.entries(meta).map(([key, value]) => ({ key, value })),
      graph: {
        name: this.name,
        node: this.#nodes,
        initializer: this.#inits,
        input: this.#inputs,
        output: this.#outputs,
      },
    });
    return onnx.ModelProto.encode(model).finish();
  }
}

export function valueInfo(name: string, type: ElemType, dims: (number | string)[]): OnnxNs.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType: DT[type],
        shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) },
      },
    },
  };
}

export function attribute(name: string, v: AttrValue): OnnxNs.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if (typeof v === 'string') return { name, type: T.STRING, s: new TextEncoder().encode(v) };
  if (typeof v === 'number') return Number.isInteger(v) && !Object.is(v, -0) ? { name, type: T.INT, i: v } : { name, type: T.FLOAT, f: v };
  if (Array.isArray(v)) return { name, type: T.INTS, ints: v };
  if ('int' in v) return { name, type: T.INT, i: v.int };
  return { name, type: T.INTS, ints: v.ints };
}

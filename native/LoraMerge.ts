/**
 * LoRA merge at load time (`lora_dict` {path: weight}, a reload key). ONNX Runtime cannot patch the
 * weights of a loaded session, so we patch the UNet's ONNX protobuf: for every initializer named in
 * the LoRA file, W += weight · (alpha / rank) · (up @ down), then write the merged model to a cache
 * folder keyed by the inputs and load that.
 *
 * LoRA file format (documented in docs/models.md): safetensors, F32, keyed by the UNet's ONNX
 * initializer names (real exports name them after the torch modules, e.g.
 * `down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight`, or `onnx::MatMul_…`):
 *   `<initializer>.lora_down.weight` [r, in·kh·kw]   `<initializer>.lora_up.weight` [out, r]
 *   `<initializer>.alpha` [] or [1] (optional, default r)
 * A 2-D initializer is a MatMul weight laid out [in, out] (so the update is transposed); a 4-D one
 * is a Conv weight [out, in, kh, kw]. Files live under `<modelsDir>/lora/`; `lora_dict` keys are
 * paths relative to it (`name` means `name.safetensors`). Weights of 0 are skipped: a dict of zeros
 * loads the original file, byte for byte.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isAbsolute, join, normalize, sep } from 'node:path';
import type { onnx as OnnxNs } from 'onnx-proto';
import type { Logger } from 'pino';
import { ModelLoadError } from './errors.ts';

const require = createRequire(import.meta.url);
const { onnx } = require('onnx-proto') as { onnx: typeof OnnxNs };

export interface SafeTensor {
  dtype: string;
  shape: number[];
  data: Float32Array;
}

/** Reads a safetensors file (F32 tensors only; others are refused). */
export function readSafetensors(buf: Buffer, file = 'safetensors'): Map<string, SafeTensor> {
  if (buf.length < 8) throw new ModelLoadError(file, 'not a safetensors file (too short)');
  const hlen = Number(buf.readBigUInt64LE(0));
  if (hlen <= 0 || 8 + hlen > buf.length) throw new ModelLoadError(file, 'not a safetensors file (bad header length)');
  const header = JSON.parse(buf.subarray(8, 8 + hlen).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] } | Record<string, string>>;
  const base = 8 + hlen;
  const out = new Map<string, SafeTensor>();
  for (const [name, v] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const t = v as { dtype: string; shape: number[]; data_offsets: [number, number] };
    if (t.dtype !== 'F32') throw new ModelLoadError(file, `tensor ${name} is ${t.dtype}; only F32 LoRA files are supported`);
    const [a, b] = t.data_offsets;
    const bytes = buf.subarray(base + a, base + b);
    // Copy: the slice may not be 4-byte aligned.
    const data = new Float32Array(bytes.length / 4);
    new Uint8Array(data.buffer).set(bytes);
    if (data.length !== t.shape.reduce((x, y) => x * y, 1)) throw new ModelLoadError(file, `tensor ${name} size does not match its shape`);
    out.set(name, { dtype: t.dtype, shape: t.shape, data });
  }
  return out;
}

/** Writes F32 tensors as safetensors (the tiny builder's LoRA files, tests). */
export function writeSafetensors(tensors: Record<string, { shape: number[]; data: Float32Array }>): Buffer {
  const header: Record<string, unknown> = {};
  let off = 0;
  for (const [name, t] of Object.entries(tensors)) {
    header[name] = { dtype: 'F32', shape: t.shape, data_offsets: [off, off + t.data.byteLength] };
    off += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  // Pad the header so the data starts 8-byte aligned (as the reference writer does).
  while ((8 + json.length) % 8 !== 0) json += ' ';
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, Buffer.from(json, 'utf8'), ...Object.values(tensors).map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength))]);
}

/** Resolves a `lora_dict` key under `<modelsDir>/lora/`, refusing absolute paths and `..`. */
export function loraFile(modelsDir: string, key: string): string {
  const rel = normalize(key.endsWith('.safetensors') ? key : `${key}.safetensors`);
  if (isAbsolute(rel) || rel.startsWith('..') || rel.split(sep).includes('..')) throw new ModelLoadError(join(modelsDir, 'lora'), `lora path ${key} escapes the lora folder`);
  return join(modelsDir, 'lora', rel);
}

/**
 * Bytes the merged UNets of one model may take on disk (default 8 GiB: four SD1.5 fp16 UNets, or
 * one SDXL one and change). Least recently used merges are deleted past it.
 */
export const LORA_CACHE_MAX_BYTES = 8 * 1024 ** 3;
/**
 * LoRA weights are merged rounded to this step: 0.5 and 0.501 share one merged UNet (a visible
 * difference needs more than 0.01), so a client cannot write a new file per request by nudging.
 */
export const LORA_WEIGHT_STEP = 0.01;

/** Deletes the least recently used merges until the cache fits `maxBytes` (never `keep`). */
function evictLoraCache(cacheDir: string, keep: string, maxBytes: number, logger: Logger): void {
  const entries = readdirSync(cacheDir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => {
      const file = join(cacheDir, d.name, 'unet', 'model.onnx');
      const st = existsSync(file) ? statSync(file) : null;
      return { dir: join(cacheDir, d.name), file, bytes: st?.size ?? 0, usedMs: st?.mtimeMs ?? 0 };
    })
    .sort((a, b) => a.usedMs - b.usedMs);
  let total = entries.reduce((n, e) => n + e.bytes, 0);
  for (const e of entries) {
    if (total <= maxBytes) break;
    if (e.file === keep) continue;
    rmSync(e.dir, { recursive: true, force: true });
    total -= e.bytes;
    logger.info(`LoraMerge | evicted a merged UNet [bytes:${e.bytes}] [cacheBytes:${total}] [maxBytes:${maxBytes}]`);
  }
}

/**
 * Returns the UNet file to load: the original when no LoRA has a non-zero weight, else a merged
 * copy under `<modelDir>/.lora-cache/<key>/unet/model.onnx` (built once per combination of files
 * and weights rounded to LORA_WEIGHT_STEP; the cache is kept under `maxCacheBytes`, LRU).
 */
export function mergedUnetFile(modelsDir: string, modelDir: string, loraDict: Record<string, number> | null, logger: Logger, maxCacheBytes = LORA_CACHE_MAX_BYTES): string {
  const unet = join(modelDir, 'unet', 'model.onnx');
  const active = Object.entries(loraDict ?? {})
    .map(([k, w]): [string, number] => [k, Math.round(w / LORA_WEIGHT_STEP) * LORA_WEIGHT_STEP])
    .filter(([, w]) => w !== 0)
    .sort(([a], [b]) => a.localeCompare(b));
  if (active.length === 0) return unet;
  if (existsSync(join(modelDir, 'unet', 'weights.pb')) || existsSync(join(modelDir, 'unet', 'model.onnx_data'))) {
    throw new ModelLoadError(modelDir, 'LoRA merge of a UNet with external weight data (>2 GB exports) is not supported yet');
  }
  const files = active.map(([k, w]) => ({ key: k, file: loraFile(modelsDir, k), weight: w }));
  for (const f of files) if (!existsSync(f.file)) throw new ModelLoadError(f.file, `lora ${f.key} not found`);
  const h = createHash('sha256');
  const st = statSync(unet);
  h.update(`${unet}:${st.size}:${st.mtimeMs}`);
  for (const f of files) h.update(`|${f.key}:${f.weight}:`).update(readFileSync(f.file));
  const cacheDir = join(modelDir, '.lora-cache');
  const out = join(cacheDir, h.digest('hex').slice(0, 16), 'unet', 'model.onnx');
  if (existsSync(out)) {
    const now = new Date();
    utimesSync(out, now, now); // mtime is the LRU clock (atime is often not kept)
    return out;
  }
  const t0 = performance.now();
  const model = onnx.ModelProto.decode(readFileSync(unet));
  const inits = new Map((model.graph?.initializer ?? []).map((i) => [i.name ?? '', i]));
  let patched = 0;
  for (const f of files) patched += applyLora(inits, readSafetensors(readFileSync(f.file), f.file), f.weight, f.file);
  mkdirSync(join(out, '..'), { recursive: true });
  const tmp = `${out}.tmp-${process.pid}`;
  writeFileSync(tmp, onnx.ModelProto.encode(model).finish());
  renameSync(tmp, out);
  evictLoraCache(cacheDir, out, maxCacheBytes, logger);
  logger.info(`LoraMerge | merged [loras:${files.map((f) => `${f.key}@${f.weight}`).join(',')}] [tensors:${patched}] in ${Math.round(performance.now() - t0)} ms → ${out}`);
  return out;
}

/** Adds one LoRA into the initializers; returns how many were patched. */
function applyLora(inits: Map<string, OnnxNs.ITensorProto>, lora: Map<string, SafeTensor>, weight: number, file: string): number {
  let n = 0;
  for (const [key, down] of lora) {
    if (!key.endsWith('.lora_down.weight')) continue;
    const name = key.slice(0, -'.lora_down.weight'.length);
    const up = lora.get(`${name}.lora_up.weight`);
    const init = inits.get(name);
    if (!up) throw new ModelLoadError(file, `${key} has no matching lora_up`);
    if (!init) throw new ModelLoadError(file, `UNet has no initializer ${name}`);
    if (init.dataType !== 1) throw new ModelLoadError(file, `initializer ${name} is not float32`);
    const dims = (init.dims ?? []).map(Number);
    const r = down.shape[0] as number;
    const k = (down.data.length / r) | 0;
    const outCh = up.shape[0] as number;
    if (up.shape[1] !== r) throw new ModelLoadError(file, `${name}: lora_up rank ${up.shape[1]} != lora_down rank ${r}`);
    const alphaT = lora.get(`${name}.alpha`);
    const s = weight * ((alphaT?.data[0] ?? r) / r);
    const w = initializerData(init);
    if (dims.length === 2) {
      // MatMul weight [in, out]: W[i][o] += s · Σ up[o][r] · down[r][i].
      const [inD, outD] = dims as [number, number];
      if (inD !== k || outD !== outCh) throw new ModelLoadError(file, `${name}: [${dims}] vs LoRA [${outCh}x${r}]@[${r}x${k}]`);
      for (let o = 0; o < outD; o++) {
        for (let q = 0; q < r; q++) {
          const u = s * (up.data[o * r + q] as number);
          if (u === 0) continue;
          for (let i = 0; i < inD; i++) w[i * outD + o] = (w[i * outD + o] as number) + u * (down.data[q * k + i] as number);
        }
      }
    } else if (dims.length === 4) {
      // Conv weight [out, in, kh, kw] = [out, k].
      if (dims[0] !== outCh || (dims[1] as number) * (dims[2] as number) * (dims[3] as number) !== k) throw new ModelLoadError(file, `${name}: [${dims}] vs LoRA [${outCh}x${r}]@[${r}x${k}]`);
      for (let o = 0; o < outCh; o++) {
        for (let q = 0; q < r; q++) {
          const u = s * (up.data[o * r + q] as number);
          if (u === 0) continue;
          for (let i = 0; i < k; i++) w[o * k + i] = (w[o * k + i] as number) + u * (down.data[q * k + i] as number);
        }
      }
    } else {
      throw new ModelLoadError(file, `${name}: rank-${dims.length} initializer cannot take a LoRA`);
    }
    init.rawData = new Uint8Array(w.buffer, w.byteOffset, w.byteLength);
    init.floatData = [];
    n++;
  }
  return n;
}

function initializerData(init: OnnxNs.ITensorProto): Float32Array {
  if (init.rawData && init.rawData.length > 0) {
    const out = new Float32Array(init.rawData.length / 4);
    new Uint8Array(out.buffer).set(init.rawData);
    return out;
  }
  return Float32Array.from(init.floatData ?? []);
}

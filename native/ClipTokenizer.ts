/**
 * CLIP's BPE tokenizer, built from the `tokenizer/` folder of a diffusers export (vocab.json +
 * merges.txt, optional special_tokens_map.json / tokenizer_config.json). We assemble the same
 * tokenizer.json pipeline Hugging Face ships for CLIP and run it with @huggingface/tokenizers:
 * NFC, whitespace collapse, lowercase; CLIP's pre-tokenizer regex; byte-level symbols; BPE with
 * the `</w>` word suffix. Special ids are read from the vocab (49406/49407 in the real one).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { ModelLoadError } from './errors.ts';

const BOS = '<|startoftext|>';
const EOS = '<|endoftext|>';
/** CLIP's pre-tokenizer regex (openai/CLIP simple_tokenizer.py, as in HF tokenizer.json). */
const CLIP_PATTERN = "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+";

/** GPT-2/CLIP reversible byte → printable-unicode map. */
export function bytesToUnicode(): Map<number, string> {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  return new Map(bs.map((b, i) => [b, String.fromCodePoint(cs[i] as number)]));
}

export interface ClipTokenizerOptions {
  /** Sequence length including bos/eos; default 77 (CLIP max_position_embeddings). */
  maxLength?: number;
  /** Pad token; default eos (SD 1.x); SD 2.x tokenizers use "!". */
  padToken?: string;
}

export class ClipTokenizer {
  readonly maxLength: number;
  readonly bosId: number;
  readonly eosId: number;
  readonly padId: number;
  readonly vocabSize: number;
  readonly #tok: Tokenizer;

  constructor(vocab: Record<string, number>, merges: readonly string[], options: ClipTokenizerOptions = {}) {
    const bosId = vocab[BOS];
    const eosId = vocab[EOS];
    if (bosId === undefined || eosId === undefined) throw new RangeError(`vocab lacks ${BOS} or ${EOS}`);
    const padId = vocab[options.padToken ?? EOS];
    if (padId === undefined) throw new RangeError(`vocab lacks pad token ${options.padToken}`);
    this.bosId = bosId;
    this.eosId = eosId;
    this.padId = padId;
    this.maxLength = options.maxLength ?? 77;
    this.vocabSize = Math.max(...Object.values(vocab)) + 1;
    const special = (content: string, id: number) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: true,
      special: true,
    });
    const json = {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: [special(BOS, bosId), special(EOS, eosId)],
      normalizer: {
        type: 'Sequence',
        normalizers: [{ type: 'NFC' }, { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' }, { type: 'Lowercase' }],
      },
      pre_tokenizer: {
        type: 'Sequence',
        pretokenizers: [
          { type: 'Split', pattern: { Regex: CLIP_PATTERN }, behavior: 'Removed', invert: true },
          { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
        ],
      },
      post_processor: null,
      decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: {
        type: 'BPE',
        dropout: null,
        unk_token: EOS,
        continuing_subword_prefix: '',
        end_of_word_suffix: '</w>',
        fuse_unk: false,
        byte_fallback: false,
        vocab,
        merges: [...merges],
      },
    };
    this.#tok = new Tokenizer(json as never, { model_max_length: this.maxLength } as never);
  }

  /** Loads `<dir>/vocab.json` + `<dir>/merges.txt` (+ special_tokens_map.json, tokenizer_config.json). */
  static fromDir(dir: string): ClipTokenizer {
    try {
      const vocab = JSON.parse(readFileSync(join(dir, 'vocab.json'), 'utf8')) as Record<string, number>;
      const merges = readFileSync(join(dir, 'merges.txt'), 'utf8')
        .split('\n')
        .filter((l) => l.length > 0 && !l.startsWith('#version'));
      const opts: ClipTokenizerOptions = {};
      const stm = join(dir, 'special_tokens_map.json');
      if (existsSync(stm)) {
        const pad = (JSON.parse(readFileSync(stm, 'utf8')) as { pad_token?: string | { content: string } }).pad_token;
        if (pad) opts.padToken = typeof pad === 'string' ? pad : pad.content;
      }
      const cfg = join(dir, 'tokenizer_config.json');
      if (existsSync(cfg)) {
        const max = (JSON.parse(readFileSync(cfg, 'utf8')) as { model_max_length?: number }).model_max_length;
        // Real configs hold 77; some exports write a huge sentinel meaning "unset".
        if (max && max <= 4096) opts.maxLength = max;
      }
      return new ClipTokenizer(vocab, merges, opts);
    } catch (err) {
      throw new ModelLoadError(dir, 'cannot read CLIP tokenizer (vocab.json, merges.txt)', { cause: err });
    }
  }

  /** BPE ids of `text` without bos/eos. */
  tokenize(text: string): number[] {
    return this.#tok.encode(text, { add_special_tokens: false } as never).ids;
  }

  /**
   * `[bos, …ids, eos, pad…]` of exactly `maxLength` ids; over-long prompts are truncated to
   * maxLength−2 tokens (as the diffusers pipelines do).
   */
  encode(text: string): Int32Array {
    const ids = this.tokenize(text).slice(0, this.maxLength - 2);
    const out = new Int32Array(this.maxLength).fill(this.padId);
    out[0] = this.bosId;
    out.set(ids, 1);
    out[ids.length + 1] = this.eosId;
    return out;
  }
}

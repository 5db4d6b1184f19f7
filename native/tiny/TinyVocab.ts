/**
 * A small CLIP-format BPE vocabulary (vocab.json + merges.txt) for the demo models, trained with
 * plain pair-frequency BPE on a short built-in corpus. Layout mirrors CLIP's: the 256 byte symbols,
 * the same with `</w>`, then one token per merge, then `<|startoftext|>` and `<|endoftext|>` last.
 */
import { bytesToUnicode } from '../ClipTokenizer.ts';

const CORPUS = `a photo of a cat dog bird flower flowers tree forest city street night day sunset sunrise
portrait painting oil watercolor sketch anime cartoon style in the on with and by cinematic lighting
blue red green yellow purple orange black white gold silver neon cyberpunk fantasy castle mountain
river ocean sea beach sky clouds rain snow fire water stone glass metal wood robot astronaut space
galaxy star stars planet moon sun face woman man girl boy old young happy dark bright colorful
blurry low quality flat 2d detailed high resolution masterpiece beautiful vibrant dreamy surreal
van gogh monet picasso studio ghibli pixar render 3d octane unreal engine photograph digital art`;

export interface TinyVocab {
  vocab: Record<string, number>;
  merges: string[];
}

export function buildTinyVocab(numMerges = 240): TinyVocab {
  const b2u = bytesToUnicode();
  const byteSyms = [...b2u.values()];
  const vocabList: string[] = [...byteSyms, ...byteSyms.map((s) => `${s}</w>`)];
  // Words as symbol sequences; the last symbol carries `</w>` as in CLIP.
  const words = new Map<string, number>();
  for (const w of CORPUS.toLowerCase().split(/\s+/).filter(Boolean)) words.set(w, (words.get(w) ?? 0) + 1);
  let seqs = [...words.entries()].map(([w, n]) => {
    const syms = [...new TextEncoder().encode(w)].map((b) => b2u.get(b) as string);
    syms[syms.length - 1] += '</w>';
    return { syms, n };
  });
  const merges: string[] = [];
  for (let m = 0; m < numMerges; m++) {
    const counts = new Map<string, number>();
    for (const { syms, n } of seqs) {
      for (let i = 0; i + 1 < syms.length; i++) {
        const k = `${syms[i]} ${syms[i + 1]}`;
        counts.set(k, (counts.get(k) ?? 0) + n);
      }
    }
    let best = '';
    let bestN = 0;
    // Ties broken by first occurrence, which keeps the result deterministic.
    for (const [k, n] of counts) if (n > bestN) [best, bestN] = [k, n];
    if (bestN < 1) break;
    merges.push(best);
    const [a, b] = best.split(' ') as [string, string];
    vocabList.push(a + b);
    seqs = seqs.map(({ syms, n }) => {
      const out: string[] = [];
      for (let i = 0; i < syms.length; i++) {
        if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(syms[i] as string);
      }
      return { syms: out, n };
    });
  }
  vocabList.push('<|startoftext|>', '<|endoftext|>');
  const vocab: Record<string, number> = {};
  vocabList.forEach((tok, i) => {
    if (!(tok in vocab)) vocab[tok] = i;
  });
  return { vocab, merges };
}

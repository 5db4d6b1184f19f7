import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { bytesToUnicode, ClipTokenizer } from '../../native/ClipTokenizer.ts';
import { buildTinyVocab } from '../../native/tiny/TinyVocab.ts';

const dir = mkdtempSync(join(tmpdir(), 'reverie-tok-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A CLIP-format tokenizer folder written here: CLIP's layout (256 byte symbols, the same with
 * `</w>`, one token per merge, then the two specials last) with merges for "cat", "the", "!".
 */
function writeClipFolder(sub: string, extra: { pad?: string; maxLength?: number } = {}): string {
  const d = join(dir, sub);
  mkdirSync(d, { recursive: true });
  const syms = [...bytesToUnicode().values()];
  const vocab: Record<string, number> = {};
  for (const s of syms) vocab[s] = Object.keys(vocab).length;
  for (const s of syms) vocab[`${s}</w>`] = Object.keys(vocab).length;
  const merges = ['c a', 'ca t</w>', 't h', 'th e</w>'];
  for (const m of merges) vocab[m.replace(' ', '')] = Object.keys(vocab).length;
  vocab['<|startoftext|>'] = Object.keys(vocab).length;
  vocab['<|endoftext|>'] = Object.keys(vocab).length;
  writeFileSync(join(d, 'vocab.json'), JSON.stringify(vocab));
  writeFileSync(join(d, 'merges.txt'), `#version: 0.2\n${merges.join('\n')}\n`);
  writeFileSync(join(d, 'special_tokens_map.json'), JSON.stringify({ bos_token: '<|startoftext|>', eos_token: '<|endoftext|>', unk_token: '<|endoftext|>', pad_token: extra.pad ?? '<|endoftext|>' }));
  writeFileSync(join(d, 'tokenizer_config.json'), JSON.stringify({ model_max_length: extra.maxLength ?? 77, do_lower_case: true }));
  return d;
}

const sd15 = ClipTokenizer.fromDir(writeClipFolder('sd15'));

void t.test('encode is [bos, tokens…, eos, pad…] of exactly 77 ids; pad defaults to eos (SD 1.x)', { timeout: 10_000 }, async (t) => {
  const ids = sd15.encode('cat');
  t.equal(ids.length, 77);
  t.equal(ids[0], sd15.bosId);
  t.equal(ids[2], sd15.eosId);
  t.ok([...ids.subarray(3)].every((v) => v === sd15.eosId), 'padded with eos');
  t.equal(sd15.bosId, 512 + 4, 'specials come last, as in the real vocab (49406/49407)');
});

void t.test('words end with </w>: a merged word is one id, an unmerged one spells bytes with </w> on the last', { timeout: 10_000 }, async (t) => {
  const cat = sd15.tokenize('cat');
  t.equal(cat.length, 1, '"cat" merges to cat</w>');
  const dog = sd15.tokenize('dog');
  t.equal(dog.length, 3);
  t.ok((dog[2] as number) >= 256 && (dog[2] as number) < 512, 'last byte of a word is the </w> variant');
  t.ok((dog[0] as number) < 256, 'inner bytes are plain');
});

void t.test('lowercases and collapses whitespace before BPE', { timeout: 10_000 }, async (t) => {
  t.same(sd15.tokenize('The   CAT'), sd15.tokenize('the cat'));
  t.equal(sd15.tokenize('the cat').length, 2);
});

void t.test('over-long prompts are truncated to 75 tokens + bos/eos', { timeout: 10_000 }, async (t) => {
  const ids = sd15.encode(Array.from({ length: 100 }, () => 'cat').join(' '));
  t.equal(ids.length, 77);
  t.equal(ids[0], sd15.bosId);
  t.equal(ids[76], sd15.eosId);
  t.ok([...ids.subarray(1, 76)].every((v) => v === sd15.tokenize('cat')[0]));
});

void t.test('SD 2.x folders pad with "!" and honour model_max_length', { timeout: 10_000 }, async (t) => {
  const sd21 = ClipTokenizer.fromDir(writeClipFolder('sd21', { pad: '!', maxLength: 16 }));
  const ids = sd21.encode('the cat');
  t.equal(ids.length, 16);
  t.equal(sd21.padId, 0, '"!" is byte symbol 0 of the byte-level alphabet');
  t.same([...ids.subarray(4)], new Array(12).fill(0));
  t.equal(ids[3], sd21.eosId);
});

void t.test('the tiny demo vocab works through the same path', { timeout: 10_000 }, async (t) => {
  const { vocab, merges } = buildTinyVocab();
  const tok = new ClipTokenizer(vocab, merges);
  const ids = tok.encode('a photo of a cat');
  t.equal(ids[0], vocab['<|startoftext|>']);
  t.ok(tok.tokenize('a photo of a cat').length <= 10, 'corpus words merge into few tokens');
  t.throws(() => new ClipTokenizer({ a: 0 }, []), /lacks/);
});

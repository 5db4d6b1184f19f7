/**
 * The prompt filter removes listed words (whole words, case-insensitive, prefixes with *), keeps
 * the rest of the prompt and weights, and never touches innocent words that contain a listed one.
 */
import t from 'tap';
import { PromptFilter } from '../../streams/PromptFilter.ts';

t.test('the shipped list censors whole words and keeps the rest', async (t) => {
  const f = PromptFilter.fromFile();
  t.ok(f.size > 20, `${f.size} entries loaded from streams/data/prompt-blocklist.txt`);
  t.same(f.text('a NAKED woman on a beach'), { value: 'a woman on a beach', censored: true });
  t.same(f.text('nudity, flowers, nsfw'), { value: 'flowers', censored: true }, 'prefix entries (nud*) and comma tidy-up');
  t.same(f.text('child   porn'), { value: '', censored: true }, 'phrases match across spaces');
  t.same(f.text('Essex countryside, a sexton ringing bells'), { value: 'Essex countryside, a sexton ringing bells', censored: false }, 'words containing a listed word are kept');
  t.same(f.text('a calm lake'), { value: 'a calm lake', censored: false });
  t.same(f.prompt([['nude statue', 0.7], ['a garden', 0.3]]), { value: [['statue', 0.7], ['a garden', 0.3]], censored: true }, 'weighted lists keep weights');
});

t.test('a custom list: comments and blank lines ignored; an empty list censors nothing', async (t) => {
  const f = new PromptFilter(['# comment', '', 'Gore', 'blood*']);
  t.equal(f.size, 2);
  t.same(f.text('gore and bloody rain'), { value: 'and rain', censored: true });
  t.same(new PromptFilter([]).text('anything goes'), { value: 'anything goes', censored: false });
});

/**
 * The README and docs/ stand alone for someone with only a clone: every relative link resolves to
 * a file in the repository, nothing points at files outside it (`../shared/`, the reference
 * notes) or at issue numbers, and the README states the Node versions and starts with the one
 * start command.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import t from 'tap';

const ROOT = new URL('../..', import.meta.url).pathname;

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? markdownFiles(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : []));
}
const files = [join(ROOT, 'README.md'), ...markdownFiles(join(ROOT, 'docs'))];

t.test('every relative link in README and docs resolves inside the repository', async (t) => {
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = (m[1] as string).split('#')[0] as string;
      if (!target || /^[a-z]+:/.test(target)) continue;
      const abs = resolve(dirname(file), target);
      const name = `${relative(ROOT, file)} → ${m[1]}`;
      t.ok(abs.startsWith(ROOT), `${name}: inside the repository`);
      t.ok(existsSync(abs), `${name}: exists`);
    }
  }
});

t.test('no pointers a reader cannot follow: shared/ notes, reference notes, issue numbers', async (t) => {
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    const name = relative(ROOT, file);
    t.notMatch(text, /\.\.\/shared\/|shared\/spec\/|shared\/reference|reference\/[a-z-]+\.md/, `${name}: no shared/ or reference notes`);
    t.notMatch(text, /\bissue\s*#?\d+|\(#\d+\)|\bPR\s*#\d+/i, `${name}: no issue numbers`);
  }
});

t.test('the README starts with the one start command and states the Node versions', async (t) => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const firstCode = /```sh\n([^\n]+)\n/.exec(readme)?.[1];
  t.equal(firstCode, './reverie up', 'the first command shown is ./reverie up');
  t.match(readme, /20\.19/, 'names the minimum Node 20');
  t.match(readme, /22/, 'and Node 22');
  const engines = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node;
  t.equal(engines, '>=20.19 <21 || >=22', 'the README matches package.json engines');
  t.ok(existsSync(join(ROOT, 'reverie')), 'the command exists');
});

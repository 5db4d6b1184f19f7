/**
 * Section plans as the README and docs/ show them match the real API: every shorthand list of a
 * section's fields (`sections: [{ name, bars, … }]`: a brace list of bare names holding `bars`)
 * names only fields of the request's or the Song record's section schema, and every JSON body
 * with `sections` is accepted by POST /songs on a real app and echoed as asked. A reader who
 * copies an example gets a song, not a 400 "Unrecognized key".
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import t from 'tap';
import { SongCreateSchema, SongSchema } from '../../control/routes/music.ts';
import { makeApp } from '../helpers/app.ts';
import { songServices } from '../helpers/songs.ts';

const ROOT = new URL('../..', import.meta.url).pathname;

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? markdownFiles(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : []));
}
const docs = [join(ROOT, 'README.md'), ...markdownFiles(join(ROOT, 'docs'))].map((file) => ({ name: relative(ROOT, file), text: readFileSync(file, 'utf8') }));

const requestFields = Object.keys(SongCreateSchema.shape.sections.unwrap().element.shape);
const recordFields = Object.keys(SongSchema.shape.sections.element.shape);

/** `{ name, bars, energy, style? }`: bare field names, optional marks and ellipses, nothing else. */
const SHORTHAND = /\{\s*((?:[A-Za-z_]+\??|…)(?:\s*,\s*(?:[A-Za-z_]+\??|…))+)\s*\}/;

t.test('every shorthand of a section names only fields the API knows', async (t) => {
  let seen = 0;
  for (const { name, text } of docs) {
    // A brace list of bare names that holds `bars` describes a section (`sections: [{ … }]`, "a list of `{ … }`").
    for (const list of text.matchAll(new RegExp(SHORTHAND.source, 'g'))) {
      const fields = (list[1] as string).split(',').map((f) => f.trim().replace(/\?$/, '')).filter((f) => f !== '…');
      if (!fields.includes('bars')) continue;
      seen++;
      const unknown = fields.filter((f) => !requestFields.includes(f) && !recordFields.includes(f));
      t.same(unknown, [], `${name}: ${list[0]} names fields of the section schema (${[...new Set([...requestFields, ...recordFields])].join(', ')})`);
    }
  }
  t.ok(seen >= 3, `${seen} section shorthands found in the docs`);
});

t.test('every JSON body with sections in the docs is accepted by POST /songs', async (t) => {
  const { app, key } = await makeApp(t, { services: songServices });
  const auth = { authorization: `Bearer ${await key('pro')}` };
  let seen = 0;
  for (const { name, text } of docs) {
    for (const m of text.matchAll(/```json\n([\s\S]*?)```/g)) {
      if (!/"sections"\s*:/.test(m[1] as string)) continue;
      seen++;
      const body = JSON.parse(m[1] as string) as { sections: { name: string; bars: number }[] };
      const res = await app.inject({ method: 'POST', url: '/music/v1/songs', headers: auth, payload: body });
      t.equal(res.statusCode, 202, `${name}: the example is accepted (${res.statusCode === 202 ? 'ok' : res.json().message})`);
      if (res.statusCode !== 202) continue;
      t.same(
        res.json().sections.map((s: { name: string; bars: number }) => [s.name, s.bars]),
        body.sections.map((s) => [s.name, s.bars]),
        `${name}: the song follows the example's sections`,
      );
    }
  }
  t.ok(seen >= 1, `${seen} JSON bodies with sections found in the docs`);
});

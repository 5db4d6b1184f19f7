/**
 * The error catalogues are documented: every code of each area appears in docs/api.md with its
 * status, so clients can branch on codes they can read about.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { MUSIC_ERRORS, STREAM_ERRORS } from '../../control/errors.ts';

const doc = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8');

for (const [area, catalogue] of [['Area A', MUSIC_ERRORS], ['Area B', STREAM_ERRORS]] as const) {
  t.test(`every ${area} error code is documented with its status`, async (t) => {
    for (const [code, { status }] of Object.entries(catalogue)) {
      const row = doc.split('\n').find((line) => line.startsWith(`| \`${code}\` |`));
      t.ok(row, `${code} has a row in docs/api.md`);
      t.match(row ?? '', new RegExp(`\\| ${status} \\|`), `${code} is documented as ${status}`);
    }
  });
}

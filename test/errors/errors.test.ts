/**
 * The error catalogues and the docs agree both ways: every code of each area appears in
 * docs/api.md with its status (clients can branch on codes they can read about), the docs list no
 * code the server does not have, and every code is raised somewhere (no reserved codes that never
 * happen). An ApiError keeps the error behind it as its cause.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { ApiError, MUSIC_ERRORS, STREAM_ERRORS, streamError, withoutPaths } from '../../errors/index.ts';

const root = new URL('../../', import.meta.url).pathname;
const doc = readFileSync(join(root, 'docs/api.md'), 'utf8');

function sourcesOf(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) sourcesOf(path, out);
    else if (name.endsWith('.ts')) out.push(path);
  }
  return out;
}

for (const [area, catalogue] of [['Area A', MUSIC_ERRORS], ['Area B', STREAM_ERRORS]] as const) {
  t.test(`every ${area} error code is documented with its status`, async (t) => {
    for (const [code, { status }] of Object.entries(catalogue)) {
      const row = doc.split('\n').find((line) => line.startsWith(`| \`${code}\` |`));
      t.ok(row, `${code} has a row in docs/api.md`);
      t.match(row ?? '', new RegExp(`\\| ${status} \\|`), `${code} is documented as ${status}`);
    }
  });
}

t.test('docs/api.md documents no error code the catalogues lack', async (t) => {
  const rows = [...doc.matchAll(/^\| `([A-Za-z_]+(?:\/[A-Z_]+)?)` \| (\d{3}) \|/gm)];
  t.ok(rows.length >= Object.keys(MUSIC_ERRORS).length + Object.keys(STREAM_ERRORS).length, `${rows.length} error rows found`);
  for (const [, code, status] of rows) {
    const entry = (MUSIC_ERRORS as Record<string, { status: number }>)[code as string] ?? (STREAM_ERRORS as Record<string, { status: number }>)[code as string];
    t.ok(entry, `${code} is in a catalogue`);
    t.equal(entry?.status, Number(status), `${code}: ${status} in both`);
  }
});

t.test('every error code is raised by the server somewhere', async (t) => {
  const text = ['control', 'streams', 'songs', 'webhooks', 'media', 'store'].flatMap((part) => sourcesOf(join(root, part))).map((f) => readFileSync(f, 'utf8')).join('\n');
  for (const code of [...Object.keys(MUSIC_ERRORS), ...Object.keys(STREAM_ERRORS)]) {
    t.ok(text.includes(`'${code}'`), `${code} is used outside the catalogue`);
  }
});

t.test('an ApiError keeps its cause', async (t) => {
  const cause = new Error('store said no');
  const err = streamError('INTERNAL/ERROR', undefined, { cause });
  t.ok(err instanceof ApiError);
  t.equal(err.cause, cause);
  t.equal(streamError('STREAMS/NOT_FOUND').cause, undefined, 'none when none given');
});

t.test('client-visible text carries no file paths; URLs and plain words are kept', async (t) => {
  t.equal(
    withoutPaths('ControlNet thibaud/controlnet-sd21-canny-diffusers needs /var/lib/reverie/models/stabilityai/sd-turbo/unet/model.onnx with residual inputs'),
    'ControlNet thibaud/controlnet-sd21-canny-diffusers needs …/unet/model.onnx with residual inputs',
  );
  t.equal(withoutPaths("ENOENT: no such file or directory, open '/home/op/.cache/x/lora.safetensors'"), "ENOENT: no such file or directory, open '…/x/lora.safetensors'");
  t.equal(withoutPaths('at /work/main/native/Engine.ts:120:7'), 'at …/native/Engine.ts:120:7');
  t.equal(withoutPaths('fetch https://cdn.example.com/a/b/style.png failed'), 'fetch https://cdn.example.com/a/b/style.png failed');
  t.equal(withoutPaths('prompt was a/b/c and 1/2'), 'prompt was a/b/c and 1/2');
  t.notMatch(withoutPaths('(/tmp/rv-x/models/a) and /opt/x/y and /srv/z'), /\/tmp|\/opt|\/srv|rv-x/);
  t.equal(withoutPaths('load failed [dir:/tmp/rv-1/models/Lykon/dreamshaper-8]'), 'load failed [dir:…/Lykon/dreamshaper-8]');
  t.equal(withoutPaths('see http://127.0.0.1:8080/a/b/c and rtmp://h.example.com/app/key'), 'see http://127.0.0.1:8080/a/b/c and rtmp://h.example.com/app/key');
  t.equal(withoutPaths('missing /tmp/m/Lykon/dreamshaper-8/controlnet/control_v11f1e_sd15_tile/model.onnx'), 'missing …/control_v11f1e_sd15_tile/model.onnx', 'names what is missing');
});

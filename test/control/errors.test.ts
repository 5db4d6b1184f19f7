/**
 * The error catalogues are documented: every code of each area appears in docs/api.md with its
 * status, so clients can branch on codes they can read about.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { MUSIC_ERRORS, STREAM_ERRORS, withoutPaths } from '../../errors/index.ts';

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

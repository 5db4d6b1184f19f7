import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { text } from 'node:stream/consumers';
import t from 'tap';
import { FsBlobStore } from '../../store/BlobStore.ts';

function makeBlobs(t: { teardown(fn: () => void): void }): FsBlobStore {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'rv-blobs-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return new FsBlobStore(dir);
}

void t.test('put then get, stat, ranged stream, exists and delete', { timeout: 10_000 }, async (t) => {
  const blobs = makeBlobs(t);
  await blobs.put('songs/sng_1/take-1.mp3', Buffer.from('hello world'));
  t.equal((await blobs.get('songs/sng_1/take-1.mp3'))?.toString(), 'hello world');
  t.same(await blobs.stat('songs/sng_1/take-1.mp3'), { size: 11 });
  t.equal(await text(blobs.createReadStream('songs/sng_1/take-1.mp3', { start: 6, end: 10 })), 'world');
  t.equal(blobs.pathOf('songs/sng_1/take-1.mp3'), path.join(blobs.dir, 'songs', 'sng_1', 'take-1.mp3'));
  t.equal(await blobs.exists('songs/sng_1/take-1.mp3'), true);
  t.equal(await blobs.exists('songs/sng_1'), false, 'a directory is not a blob');
  await blobs.put('songs/sng_1/take-1.mp3', Buffer.from('v2'));
  t.equal((await blobs.get('songs/sng_1/take-1.mp3'))?.toString(), 'v2', 'put replaces');
  t.same(readdirSync(path.join(blobs.dir, 'songs', 'sng_1')), ['take-1.mp3'], 'no temp file left behind');
  t.equal(await blobs.delete('songs/sng_1/take-1.mp3'), true);
  t.equal(await blobs.delete('songs/sng_1/take-1.mp3'), false);
  t.equal(await blobs.get('songs/sng_1/take-1.mp3'), null);
  t.equal(await blobs.stat('nothing/here'), null);
});

void t.test('deletePrefix removes every key under the prefix and nothing else', { timeout: 10_000 }, async (t) => {
  const blobs = makeBlobs(t);
  for (const key of ['songs/sng_1/a.wav', 'songs/sng_1/b.wav', 'songs/sng_1/x/c.wav', 'songs/sng_10/a.wav', 'songs/sng_2/a.wav']) {
    await blobs.put(key, Buffer.from(key));
  }
  t.equal(await blobs.deletePrefix('songs/sng_1/'), 3);
  t.equal(await blobs.exists('songs/sng_10/a.wav'), true, 'sng_10 is not under sng_1/');
  t.equal(await blobs.deletePrefix('songs/sng_'), 2, 'a prefix may end mid-segment');
  t.equal(await blobs.deletePrefix('missing/dir/'), 0);
  await t.rejects(blobs.deletePrefix(''), { name: 'StoreError', code: 'invalid_argument' });
});

void t.test('keys that could escape the directory are refused', { timeout: 10_000 }, async (t) => {
  const blobs = makeBlobs(t);
  for (const key of ['../etc/passwd', '/etc/passwd', 'a/../../b', 'a//b', '', '.hidden', 'a/./b', 'a\\b', 'a/b/']) {
    await t.rejects(blobs.put(key, Buffer.from('x')), { name: 'StoreError', code: 'invalid_argument' }, `put ${JSON.stringify(key)}`);
    t.throws(() => blobs.pathOf(key), { name: 'StoreError', code: 'invalid_argument' });
  }
  await t.rejects(blobs.deletePrefix('../'), { name: 'StoreError', code: 'invalid_argument' });
});

void t.test('append creates the blob and its folders, then grows it in order; bad keys are refused', { timeout: 10_000 }, async (t) => {
  const blobs = makeBlobs(t);
  await blobs.append('songs/sng_2/1.mp3.part', Buffer.from('ab'));
  await blobs.append('songs/sng_2/1.mp3.part', Buffer.from('cd'));
  t.equal((await blobs.get('songs/sng_2/1.mp3.part'))?.toString(), 'abcd');
  await t.rejects(blobs.append('../escape', Buffer.from('x')), { code: 'invalid_argument' });
});

void t.test('list names the files directly under a folder, sorted, without temp files or folders', { timeout: 10_000 }, async (t) => {
  const blobs = makeBlobs(t);
  t.same(await blobs.list('clips/str_1'), [], 'a missing folder lists nothing');
  await blobs.put('clips/str_1/clp_b.json', Buffer.from('{}'));
  await blobs.put('clips/str_1/clp_a.mp4', Buffer.from('x'));
  await blobs.put('clips/str_1/deeper/x.json', Buffer.from('{}'));
  await blobs.put('clips/str_2/clp_c.json', Buffer.from('{}'));
  t.same(await blobs.list('clips/str_1'), ['clp_a.mp4', 'clp_b.json']);
  await t.rejects(blobs.list('../etc'), { code: 'invalid_argument' });
});

void t.test('folders names the folders directly under a folder, sorted, without files', { timeout: 10_000 }, async (t) => {
  const blobs = makeBlobs(t);
  t.same(await blobs.folders('slates'), [], 'a missing folder lists nothing');
  await blobs.put('slates/str_b/image.png', Buffer.from('x'));
  await blobs.put('slates/str_a/meta.json', Buffer.from('{}'));
  await blobs.put('slates/str_a/deeper/x.json', Buffer.from('{}'));
  await blobs.put('slates/loose.json', Buffer.from('{}'));
  t.same(await blobs.folders('slates'), ['str_a', 'str_b']);
  await t.rejects(blobs.folders('../etc'), { code: 'invalid_argument' });
});

/**
 * Style images are client bytes decoded in-process by the engine's ImageDecoder: only image
 * formats (told by their first bytes), and a pixel cap. Real files made by ffmpeg.
 */
import { execFileSync } from 'node:child_process';
import t from 'tap';
import { ImageDecoder } from '../../images/index.ts';
import { decodeTo224 } from '../../native/IpAdapter.ts';

const images = new ImageDecoder();

const make = (size: string, format: string): Buffer =>
  execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', `testsrc2=s=${size}`, '-frames:v', '1', '-f', format, 'pipe:1'], { maxBuffer: 256 * 1024 * 1024 });

t.test('PNG, JPEG and WebP style images decode to 224×224 RGB', async (t) => {
  for (const [format, codec] of [['image2pipe', 'png'], ['image2pipe', 'mjpeg'], ['webp', 'libwebp']] as const) {
    const bytes = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'testsrc2=s=320x240', '-frames:v', '1', '-c:v', codec, '-f', format, 'pipe:1']);
    const rgb = await decodeTo224(bytes, images);
    t.equal(rgb.length, 224 * 224 * 3, `${codec}: 224×224×3 bytes`);
    t.ok(rgb.some((v) => v > 0), `${codec}: not blank`);
  }
});

t.test('an image over the pixel cap is refused before it is decoded', async (t) => {
  t.equal(images.limits.maxPixels, 4096 * 4096);
  const big = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'color=red:s=4200x4200', '-frames:v', '1', '-c:v', 'png', '-f', 'image2pipe', 'pipe:1'], { maxBuffer: 64 * 1024 * 1024 });
  await t.rejects(decodeTo224(big, images), { message: /4200×4200, more than 16777216 pixels/ });
});

t.test('playlists, containers and audio are not images: refused, nothing opened', async (t) => {
  const playlist = Buffer.from('#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n');
  await t.rejects(decodeTo224(playlist, images), { message: /not a PNG, JPEG, WebP or GIF/ });
  const concat = Buffer.from("ffconcat version 1.0\nfile '/etc/hostname'\n");
  await t.rejects(decodeTo224(concat, images), { message: /not a PNG/ });
  const video = make('64x64', 'matroska');
  await t.rejects(decodeTo224(video, images), { message: /not a PNG/ }, 'a Matroska video is refused');
  const wav = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'sine=d=0.1', '-f', 'wav', 'pipe:1']);
  await t.rejects(decodeTo224(wav, images), { message: /not a PNG/ });
});

/**
 * The slate's frames (media/stream/Slate.ts): the plain slate is uniform dark grey with neutral chroma;
 * the greyed last frame keeps the picture's shape in a dimmed mid-grey range from RGB and from
 * I420; the kept copy follows the newest frame at most every copyEveryMs and is cleared on close.
 */
import t from 'tap';
import { frameBytes, type Frame } from '../../../media/index.ts';
import { Slate, greyed, plainSlate } from '../../../media/stream/Slate.ts';

const W = 64;
const H = 32;

/** Left half black, right half white, RGB. */
function halves(): Frame {
  const data = Buffer.alloc(frameBytes(W, H, 'RGB'));
  for (let y = 0; y < H; y++) for (let x = W / 2; x < W; x++) data.fill(255, (y * W + x) * 3, (y * W + x) * 3 + 3);
  return { width: W, height: H, format: 'RGB', ptsMs: 0, data };
}

t.test('the plain slate is uniform dark grey, I420, neutral chroma', async (t) => {
  const f = plainSlate(W, H);
  t.equal(f.format, 'I420');
  t.equal(f.data.length, frameBytes(W, H, 'I420'));
  t.ok(f.data.subarray(0, W * H).every((v) => v === 64), 'luma 64 everywhere');
  t.ok(f.data.subarray(W * H).every((v) => v === 128), 'chroma neutral');
});

t.test('the greyed frame keeps the picture, dimmed into 64…146, from RGB and from I420', async (t) => {
  const g = greyed(halves());
  t.equal(g.format, 'I420');
  const left = g.data[0] as number;
  const right = g.data[W - 1] as number;
  t.equal(left, 64, 'black → the floor');
  t.ok(right >= 140 && right <= 146, `white → ${right}, well below white`);
  t.ok(g.data.subarray(W * H).every((v) => v === 128), 'no colour left');
  const i420 = plainSlate(W, H);
  i420.data.fill(235, 0, W * H); // limited-range white
  const g2 = greyed(i420);
  t.ok((g2.data[0] as number) >= 140 && (g2.data[0] as number) <= 146, 'I420 white → the same level');
});

t.test('build: the kept frame greyed when it has the size asked, plain otherwise; clear forgets it', async (t) => {
  const s = new Slate(200);
  t.equal(s.build(W, H).source, 'plain', 'nothing kept yet');
  const f = halves();
  s.keep(f, 1000);
  t.equal(s.build(W, H).source, 'last_frame');
  t.equal(s.build(W * 2, H).source, 'plain', 'another size: plain');
  // A newer frame within copyEveryMs is not copied; after it, it is (into the same buffer).
  const black: Frame = { ...f, data: Buffer.alloc(f.data.length) };
  s.keep(black, 1100);
  t.equal(s.build(W, H).frame.data[W - 1], greyed(f).data[W - 1], 'within 200 ms: still the earlier frame');
  s.keep(black, 1300);
  t.equal(s.build(W, H).frame.data[W - 1], 64, 'after 200 ms: the newer frame');
  f.data.fill(0);
  s.clear();
  t.equal(s.build(W, H).source, 'plain', 'cleared');
});

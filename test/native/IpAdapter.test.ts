import { planChange } from '../../native/params/index.ts';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { ztxtBomb } from '../helpers/pngBombs.ts';
import { buildTinyModel, createFramePipeline, type FetchImage, type Frame, type FramePipeline, type ParamsPatch } from '../../native/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'reverie-ip-'));
buildTinyModel(dir, 'Lykon/dreamshaper-8', { imageEncoder: true });
buildTinyModel(dir, 'stabilityai/sd-turbo', { imageEncoder: true });
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const logger = pino({ level: 'silent' });
const W = 64;
const input: Frame = { width: W, height: W, data: Uint8Array.from({ length: W * W * 3 }, (_, i) => (Math.sin(i * 0.02) * 90 + 128) | 0), ptsMs: 0 };
// A real PNG made by ffmpeg.
const png = execFileSync('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'testsrc=size=96x64', '-frames:v', '1', '-f', 'image2pipe', '-vcodec', 'png', 'pipe:1']);
const dataUrl = `data:image/png;base64,${png.toString('base64')}`;
const base: ParamsPatch = { model_id: 'Lykon/dreamshaper-8', width: W, height: W, acceleration: 'none', use_safety_checker: false, t_index_list: [20] };

async function open(t: { teardown(fn: () => unknown): void }, params: ParamsPatch, fetchImage?: FetchImage): Promise<FramePipeline> {
  const p = await createFramePipeline({ modelsDir: dir, params: { ...base, ...params }, logger, ...(fetchImage ? { fetchImage } : {}) });
  t.teardown(() => p.close());
  return p;
}
/** Waits for the style image load (or failure), then runs one frame. */
async function settle(p: FramePipeline): Promise<Frame | null> {
  await p.whenIdle();
  return p.process(input);
}

void t.test('style image tokens change the output; scale 0 equals no IP-Adapter; scale is hot', { timeout: 60_000 }, async (t) => {
  const none = await settle(await open(t, {}));
  const p = await open(t, { ip_adapter: { enabled: true, scale: 1, weight_type: 'linear' }, ip_adapter_style_image_url: dataUrl });
  const on = await settle(p);
  t.equal(p.status().ipAdapter, 'ready', String(p.status().ipAdapterError));
  t.ok(none && on && Buffer.compare(none.data, on.data) !== 0, 'style changes the output');
  t.same(p.update(planChange(p.params, { ip_adapter: { enabled: true, scale: 0, weight_type: 'linear' } })), { mode: 'hot', hot: ['ip_adapter'], reload: [] });
  const zero = await p.process(input);
  t.ok(none && zero && Buffer.compare(none.data, zero.data) === 0, 'scale 0 is byte-identical to none (single step, no lag)');
  t.equal(p.status().restartCount, 0);
});

void t.test('https style images go through the caller’s fetchImage with the 5 MiB / 5 s caps, checked again here', { timeout: 60_000 }, async (t) => {
  const seen: { url: string; maxBytes: number; timeoutMs: number }[] = [];
  const p = await open(t, { ip_adapter: { enabled: true, scale: 1 }, ip_adapter_style_image_url: 'https://example.test/style.png' }, (url, lim) => {
    seen.push({ url, ...lim });
    return Promise.resolve(png);
  });
  await settle(p);
  t.same(seen, [{ url: 'https://example.test/style.png', maxBytes: 5 * 1024 * 1024, timeoutMs: 5000 }]);
  t.equal(p.status().ipAdapter, 'ready');
  const big = await open(t, { ip_adapter: { enabled: true, scale: 1 }, ip_adapter_style_image_url: 'https://example.test/big.png' }, () => Promise.resolve(Buffer.alloc(5 * 1024 * 1024 + 1)));
  await settle(big);
  t.equal(big.status().ipAdapter, 'error');
  t.match(big.status().ipAdapterError, /cap/);
  const noFetch = await open(t, { ip_adapter: { enabled: true, scale: 1 }, ip_adapter_style_image_url: 'https://example.test/x.png' });
  t.ok(await settle(noFetch), 'frames keep flowing without the style image');
  t.match(noFetch.status().ipAdapterError, /fetchImage/);
});

void t.test('IP-Adapter is refused on families without one (sd-turbo)', { timeout: 60_000 }, async (t) => {
  await t.rejects(createFramePipeline({ modelsDir: dir, params: { ...base, model_id: 'stabilityai/sd-turbo', ip_adapter: { enabled: true, scale: 1 } }, logger }), { code: 'INVALID_PARAMS' });
});

void t.test('IP-Adapter is fully hot-swappable: adding it, changing its type and removing it apply on the next frames without a reload', { timeout: 60_000 }, async (t) => {
  const none = await settle(await open(t, {}));
  const p = await open(t, { ip_adapter_style_image_url: dataUrl });
  const before = await settle(p);
  t.ok(none && before && Buffer.compare(none.data, before.data) === 0, 'without ip_adapter the style image is unused');
  t.same(p.update(planChange(p.params, { ip_adapter: { enabled: true, scale: 1, type: 'regular', weight_type: 'linear' } })), { mode: 'hot', hot: ['ip_adapter'], reload: [] }, 'adding it is hot');
  await p.process(input); // applies the hot change and starts encoding the style image
  const added = await settle(p);
  t.equal(p.status().ipAdapter, 'ready', String(p.status().ipAdapterError));
  t.ok(added && none && Buffer.compare(added.data, none.data) !== 0, 'the next frame carries the style');
  t.same(p.update(planChange(p.params, { ip_adapter: { enabled: true, scale: 1, type: 'faceid', weight_type: 'linear' } })), { mode: 'hot', hot: ['ip_adapter'], reload: [] }, 'changing type is hot');
  await settle(p);
  t.ok(p.status().unsupported.includes('ip_adapter.type=faceid'), 'faceid is reported as not honoured');
  t.same(p.update(planChange(p.params, { ip_adapter: null })), { mode: 'hot', hot: ['ip_adapter'], reload: [] }, 'removing it is hot');
  const removed = await settle(p);
  t.equal(p.status().ipAdapter, 'off');
  t.ok(removed && none && Buffer.compare(removed.data, none.data) === 0, 'the next frame is the same as never having had it');
  t.equal(p.status().restartCount, 0, 'no reload happened');
});

void t.test('a style image bomb (data: or fetched) is refused within a second, naming it; frames keep flowing', { timeout: 60_000 }, async (t) => {
  const bomb = await ztxtBomb(1024 * 1024 * 1024); // 1 MB whose zTXt inflates to 1 GiB
  for (const [how, url, fetchImage] of [
    ['data: URL', `data:image/png;base64,${bomb.toString('base64')}`, undefined],
    ['fetched', 'https://example.test/bomb.png', () => Promise.resolve(bomb)],
  ] as const) {
    const p = await open(t, { ip_adapter: { enabled: true, scale: 1 }, ip_adapter_style_image_url: url }, fetchImage);
    const t0 = performance.now();
    const out = await settle(p);
    const ms = performance.now() - t0;
    t.equal(p.status().ipAdapter, 'error', how);
    t.match(p.status().ipAdapterError, /zTXt chunk inflates to more than 5242880 bytes/, `${how}: names the chunk`);
    t.ok(ms < 1000, `${how}: settled ${Math.round(ms)} ms after open (< 1000)`);
    t.ok(out && out.data.length === W * W * 3, `${how}: frames keep flowing without the style image`);
  }
});

import { planChange } from '../../native/params/index.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { buildTinyModel, createFramePipeline, type Frame, type ParamsPatch } from '../../native/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'reverie-safety-'));
buildTinyModel(dir, 'demo/checked', { safetyChecker: true });
buildTinyModel(dir, 'demo/plain');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const logger = pino({ level: 'silent' });
const W = 64;
const grey: Frame = { width: W, height: W, data: Uint8Array.from({ length: W * W * 3 }, (_, i) => 100 + (i % 17)), ptsMs: 0 };
const white: Frame = { ...grey, data: new Uint8Array(W * W * 3).fill(255) };
// t_index 49 of 50 = the least noisy step: the output stays close to the input picture.
const base: ParamsPatch = { model_id: 'demo/checked', width: W, height: W, acceleration: 'none', t_index_list: [49], use_safety_checker: true };

void t.test('frames the checker flags are blanked and counted; the threshold is hot', { timeout: 60_000 }, async (t) => {
  const p = await createFramePipeline({ modelsDir: dir, params: base, logger });
  t.teardown(() => p.close());
  const ok = await p.process(grey);
  t.ok(ok && ok.data.some((v) => v !== 0), 'a mid-grey frame passes the demo checker at threshold 0.5');
  t.equal(p.status().framesBlocked, 0);
  const blocked = await p.process(white);
  t.ok(blocked && blocked.data.every((v) => v === 0), 'a near-white frame is flagged by the demo checker and blanked');
  t.equal(p.status().framesBlocked, 1);
  t.same(p.update(planChange(p.params, { safety_checker_threshold: 1 })).hot, ['safety_checker_threshold']);
  const passed = await p.process(white);
  t.ok(passed && passed.data.some((v) => v !== 0), 'threshold 1 (hot) lets it through');
  p.update(planChange(p.params, { use_safety_checker: false, safety_checker_threshold: 0 }));
  const off = await p.process(white);
  t.ok(off && off.data.some((v) => v !== 0), 'use_safety_checker false: not checked');
  t.equal(p.status().framesBlocked, 1);
  t.notOk(p.status().unsupported.includes('use_safety_checker'));
});

void t.test('without a safety_checker model the flag is reported as unsupported, never silent', { timeout: 60_000 }, async (t) => {
  const p = await createFramePipeline({ modelsDir: dir, params: { ...base, model_id: 'demo/plain' }, logger });
  t.teardown(() => p.close());
  t.ok(await p.process(grey));
  t.ok(p.status().unsupported.includes('use_safety_checker'));
});

/**
 * The node's schedule of timed changes, frame by frame: a change lands on the first frame
 * captured at or after its time (never before, never a frame later), in time order; a transition
 * steps one frame at a time to its target and restores the interpolation method; a newer change
 * finishes a running transition first; a direct update of the prompt stops it; flush applies what
 * is due when no frame comes.
 */
import t from 'tap';
import { ParamsSchedule } from '../../../media/stream/ParamsSchedule.ts';

t.test('a change lands on the first frame captured at or after its time', async (t) => {
  const s = new ParamsSchedule();
  s.add({ id: 'b', params: { seed: 2 }, applyAt: 1100 });
  s.add({ id: 'a', params: { seed: 1 }, applyAt: 1050 });
  s.add({ id: 'now', params: { guidance_scale: 1.5 }, applyAt: null });
  t.equal(s.nextDue(), -Infinity, 'the next-frame change is soonest');
  // Frames every 33.3 ms from 1000 ms.
  const landed: [string, number][] = [];
  for (let i = 0; i < 6; i++) {
    const at = 1000 + (i * 100) / 3;
    for (const m of s.take(at, {}).marks) landed.push([m.id, at]);
  }
  t.same(
    landed.map(([id, at]) => [id, Math.round(at)]),
    [
      ['now', 1000],
      ['a', 1067],
      ['b', 1100],
    ],
    'each on the first frame at or after its time (1050 → the frame of 1066.7; 1100 → the frame of 1100)',
  );
  t.equal(s.size, 0);
  s.add({ id: 'c', params: { seed: 3 }, applyAt: 5000 });
  t.ok(s.cancel('c'), 'cancelled');
  t.notOk(s.cancel('c'), 'only once');
});

t.test('a transition steps once per frame to its target and restores the interpolation method', async (t) => {
  const s = new ParamsSchedule();
  s.add({ id: 'tr', params: { prompt: 'b', guidance_scale: 2 }, applyAt: null, transition: { steps: 4, method: 'linear' } });
  const current = { prompt: 'a', prompt_interpolation_method: 'slerp' as const };
  const patches: Record<string, unknown>[] = [];
  const marks: string[] = [];
  for (let i = 0; i < 6; i++) {
    const d = s.take(i, current);
    patches.push(...d.patches);
    marks.push(...d.marks.map((m) => `${i}:${m.id}:${m.kind}`));
  }
  t.same(marks, ['0:tr:applied', '3:tr:done'], 'applied on the first frame, done on the fourth');
  t.same(
    patches.map((p) => p['prompt']),
    [
      [
        ['a', 0.75],
        ['b', 0.25],
      ],
      [
        ['a', 0.5],
        ['b', 0.5],
      ],
      [
        ['a', 0.25],
        ['b', 0.75],
      ],
      'b',
    ],
    'the weight of the new prompt rises i/N each frame; the last step sets it alone',
  );
  t.equal(patches[0]!['guidance_scale'], 2, 'the other params apply with the first step');
  t.same(
    patches.map((p) => p['prompt_interpolation_method']),
    ['linear', 'linear', 'linear', 'slerp'],
    'blended with the transition method, then back to the stream’s own',
  );
  t.notOk(s.transitioning);
});

t.test('a newer change finishes a running transition first; a direct prompt update stops it', async (t) => {
  const s = new ParamsSchedule();
  s.add({ id: 'tr', params: { prompt: 'b' }, applyAt: null, transition: { steps: 10, method: 'slerp' } });
  s.take(0, { prompt: 'a' });
  s.add({ id: 'next', params: { seed: 9 }, applyAt: null });
  const d = s.take(1, { prompt: 'a' });
  t.same(
    d.marks.map((m) => `${m.id}:${m.kind}`),
    ['tr:done', 'next:applied'],
  );
  t.equal(d.patches[0]!['prompt'], 'b', 'the transition jumps to its target');
  t.same(d.patches[1], { seed: 9 });

  s.add({ id: 'tr2', params: { prompt: 'c' }, applyAt: null, transition: { steps: 10, method: 'slerp' } });
  s.take(2, { prompt: 'b' });
  t.ok(s.transitioning);
  s.interrupt(['guidance_scale']);
  t.ok(s.transitioning, 'a direct update of other keys leaves it running');
  s.interrupt(['prompt']);
  t.notOk(s.transitioning, 'a direct prompt update stops it');
  t.same(s.take(3, { prompt: 'x' }).patches, [], 'no more steps');
});

t.test('a weighted prompt on either side jumps; flush applies what is due without a frame', async (t) => {
  const s = new ParamsSchedule();
  s.add({ id: 'w', params: { prompt: 'b' }, applyAt: 10, transition: { steps: 5, method: 'linear' } });
  const d = s.take(10, { prompt: [['a', 1]] });
  t.same(d.patches, [{ prompt: 'b' }], 'nothing to blend from: the change itself');
  t.notOk(s.transitioning);

  s.add({ id: 'x', params: { seed: 1 }, applyAt: 100 });
  s.add({ id: 'y', params: { seed: 2 }, applyAt: 300 });
  const f = s.flush(200);
  t.same(
    f.marks.map((m) => m.id),
    ['x'],
    'only what is due',
  );
  t.equal(s.nextDue(), 300);
});

/**
 * AudioMappings with the soundtrack as source, frame by frame on a synthetic take: no decoder, no
 * network, so the values each frame gets are exact. A kick every 500 ms mapped beat → seed and
 * rms → guidance_scale; frames every 33.3 ms from before the take starts.
 */
import pino from 'pino';
import t from 'tap';
import { AudioMappings } from '../../../media/stream/AudioMappings.ts';
import { Soundtrack, type SoundtrackSpec } from '../../../media/stream/Soundtrack.ts';
import type { AudioMapping } from '../../../native/params/index.ts';

const RATE = 48_000;
const FRAME_MS = 1000 / 30;
const START_AT = 1_800_000_000_000;

/** 4 s of a 60 Hz kick every 500 ms from 250 ms (decaying over 60 ms), stereo int16. */
function kicks(): { pcm: Int16Array; kicksMs: number[] } {
  const n = 4 * RATE;
  const pcm = new Int16Array(2 * n);
  const kicksMs = Array.from({ length: 8 }, (_, i) => 250 + 500 * i);
  for (let i = 0; i < n; i++) {
    const ms = (i / RATE) * 1000;
    const k = kicksMs.filter((c) => c <= ms).at(-1);
    const v = k === undefined ? 0 : 0.7 * Math.exp(-(ms - k) / 60) * Math.sin((2 * Math.PI * 60 * (ms - k)) / 1000);
    pcm[2 * i] = pcm[2 * i + 1] = Math.round(v * 32767);
  }
  return { pcm, kicksMs };
}

function mappings(list: AudioMapping[], soundtrack: Soundtrack | null): AudioMappings {
  const m = new AudioMappings({ streamId: 'str_unit', waitMs: 40, soundtrack: () => soundtrack, logger: pino({ level: 'silent' }) });
  m.set(list);
  return m;
}

const spec: SoundtrackSpec = { songId: 'sng_unit', take: 1, wavKey: 'x', startAt: START_AT, loop: false, gainDb: 0, duckPublisherDb: 0 };

t.test('beat → seed on the soundtrack: the seed changes on the first frame at or after each kick, and only then', async (t) => {
  const { pcm, kicksMs } = kicks();
  const m = mappings([{ source: 'soundtrack', feature: 'beat', param: 'seed', range: [1, 1000], smoothing_ms: 0 }], new Soundtrack(spec, pcm));
  const changed: number[] = [];
  let seed: number | undefined;
  for (let f = -10; f * FRAME_MS < 4000; f++) {
    const at = START_AT + f * FRAME_MS;
    const patch = m.atFrame(at, { seed: 7 });
    if (patch?.seed !== undefined && patch.seed !== seed) {
      seed = patch.seed as number;
      changed.push(f * FRAME_MS);
    }
  }
  t.equal(changed.length, kicksMs.length, `one change per kick: ${changed.map((c) => c.toFixed(0)).join(', ')}`);
  kicksMs.forEach((k, i) => {
    const c = changed[i] ?? NaN;
    t.ok(c >= k && c - k < FRAME_MS, `kick at ${k} ms: the first frame at or after it, ${c.toFixed(1)} ms (${(c - k).toFixed(1)} ms after)`);
  });
  t.match(m.status(), [{ source: 'soundtrack', feature: 'beat', param: 'seed', value: seed }]);
  m.close();
});

t.test('rms → guidance_scale: min at silence, up with the kicks, smoothed; nothing without a soundtrack', async (t) => {
  const { pcm } = kicks();
  const m = mappings([{ source: 'soundtrack', feature: 'rms', param: 'guidance_scale', range: [1, 2], smoothing_ms: 100 }], new Soundtrack(spec, pcm));
  const values: number[] = [];
  for (let f = -10; f < 60; f++) {
    const patch = m.atFrame(START_AT + f * FRAME_MS, { guidance_scale: 1.5 });
    if (patch?.guidance_scale !== undefined) values.push(patch.guidance_scale as number);
  }
  t.equal(values[0], 1, 'silence before the take: the range minimum');
  const max = Math.max(...values);
  t.ok(max > 1.5 && max < 2, `up to ${max.toFixed(3)} with the kicks`);
  const status = m.status()[0];
  t.ok(status && status.featureValue !== null && status.featureValue > 0, 'status shows the smoothed feature');
  m.close();

  const none = mappings([{ source: 'soundtrack', feature: 'rms', param: 'guidance_scale', range: [1, 2], smoothing_ms: 0 }], null);
  t.equal(none.atFrame(START_AT, { guidance_scale: 1.5 }), null, 'no soundtrack: the param is left alone');
  t.same(none.status(), [{ source: 'soundtrack', feature: 'rms', param: 'guidance_scale', featureValue: null, value: null }]);
  none.close();
});

t.test('a prompt weight is set inside the list, beside the weights other mappings set', async (t) => {
  const { pcm } = kicks();
  const m = mappings(
    [
      { source: 'soundtrack', feature: 'rms', param: 'prompt_weights[0]', range: [0, 1], smoothing_ms: 0 },
      { source: 'soundtrack', feature: 'beat', param: 'prompt_weights[1]', range: [0, 1], smoothing_ms: 200 },
    ],
    new Soundtrack(spec, pcm),
  );
  const params = { prompt: [['a lake', 0.5], ['a fire', 0.5]] as [string, number][] };
  let last: [string, number][] | undefined;
  for (let f = 0; f < 30; f++) {
    const patch = m.atFrame(START_AT + f * FRAME_MS, params);
    if (patch?.prompt) last = patch.prompt as [string, number][];
  }
  t.ok(last, 'the prompt list was set');
  t.same(
    last?.map(([text]) => text),
    ['a lake', 'a fire'],
    'texts kept',
  );
  t.ok(last && last[0]![1] > 0 && last[1]![1] > 0, `both weights from their mappings: ${JSON.stringify(last)}`);
  m.close();
});

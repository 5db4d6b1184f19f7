/**
 * The playground's status in words (web/streamState.js): every runner state reads as a plain
 * phrase, and DEGRADED_INFERENCE right after a params change that rebuilt the pipeline reads as
 * "Live, applying a change" — not as an error — while a real error still does.
 */
import t from 'tap';
// @ts-expect-error web/ is browser JavaScript without type declarations
import { describeState } from '../../web/streamState.js';

type Words = { word: string; tone: string; detail: string };
const describe = describeState as (data: unknown, nowMs: number) => Words;
const NOW = 1_800_000_000_000;
const status = (state: string, inf: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
  state,
  last_state_update_time: NOW,
  inference_status: { input_fps: 30, output_fps: 28, last_error: '', last_restart_time: 0, last_params_update_time: 0, ...inf },
  gateway_status: {},
  ...extra,
});

t.test('every state has words, never the raw enum', async (t) => {
  for (const [state, word, tone] of [
    ['OFFLINE', 'Waiting for video', 'idle'],
    ['LOADING', 'Starting', 'busy'],
    ['ONLINE', 'Live', 'ok'],
    ['DEGRADED_INPUT', 'Weak input', 'warn'],
    ['DEGRADED_INFERENCE', 'Output behind', 'warn'],
    ['ERROR', 'Failed to start', 'error'],
  ] as const) {
    const w = describe(status(state), NOW);
    t.equal(w.word, word, state);
    t.equal(w.tone, tone, `${state} tone`);
    t.ok(w.detail.length > 10, `${state} explains itself`);
  }
});

t.test('a processor toggle (params change + pipeline restart) reads as live, not as an error, for its minute', async (t) => {
  const toggled = status('DEGRADED_INFERENCE', { last_params_update_time: NOW - 20_000, last_restart_time: NOW - 19_000 });
  t.match(describe(toggled, NOW), { word: 'Live, applying a change', tone: 'ok' });
  const later = status('DEGRADED_INFERENCE', { last_params_update_time: NOW - 90_000, last_restart_time: NOW - 89_000 });
  t.equal(describe(later, NOW).word, 'Output behind', 'after the window it is a real slowdown');
  const crashed = status(
    'DEGRADED_INFERENCE',
    { last_params_update_time: NOW - 20_000, last_restart_time: NOW - 19_000, last_error: 'UNet run failed' },
    { gateway_status: { error: { error_message: 'UNet run failed', error_time: NOW - 5_000 } } },
  );
  t.match(describe(crashed, NOW), { word: 'Recovering from an error', tone: 'error', detail: /UNet run failed/ });
  const noOutput = status('DEGRADED_INFERENCE', { last_params_update_time: NOW - 20_000, last_restart_time: NOW - 19_000, output_fps: 0 });
  t.equal(describe(noOutput, NOW).tone, 'warn', 'a reload that shows nothing is not called live');
});

t.test('the server clock is used, so a skewed browser clock does not change the words', async (t) => {
  const toggled = status('DEGRADED_INFERENCE', { last_params_update_time: NOW - 20_000, last_restart_time: NOW - 19_000 });
  t.equal(describe(toggled, NOW + 3_600_000).word, 'Live, applying a change');
});

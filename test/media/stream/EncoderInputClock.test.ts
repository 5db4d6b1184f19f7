/**
 * EncoderInputClock: an encoder's input sample n is the mix frame it was, across the frames the
 * mix skipped after a long stall, so encoded frames are stamped when their audio was due.
 */
import t from 'tap';
import { EncoderInputClock } from '../../../media/stream/EncoderInputClock.ts';

/** The mix's clock as SoundtrackMixer has it: frame f due at 1000 + f/48 ms. */
const dueMs = (frame: number) => 1000 + frame / 48;

t.test('back to back blocks: input sample n is mix frame first + n', async (t) => {
  const clock = new EncoderInputClock(dueMs);
  let made = 4800; // the encoder started 100 ms into the mix
  for (const size of [480, 517, 1, 960, 333, 480]) {
    clock.fed(made, size);
    made += size;
  }
  t.equal(clock.dueAt(0), dueMs(4800), 'the first sample: the mix frame the encoder started at');
  t.equal(clock.dueAt(1024), dueMs(4800 + 1024), 'the second AAC frame');
  t.equal(clock.dueAt(2048), dueMs(4800 + 2048));
});

t.test('after a skip the samples are the frames past it; asked in order, the earlier runs are let go', async (t) => {
  const clock = new EncoderInputClock(dueMs);
  clock.fed(0, 1000);
  clock.fed(1000, 1000);
  // A 1.8 s stall: the mix skipped 0.8 s (38 400 frames) and made up the last second in one block.
  clock.fed(2000 + 38_400, 48_000);
  clock.fed(2000 + 38_400 + 48_000, 480);
  t.equal(clock.dueAt(1024), dueMs(1024), 'before the skip: unchanged');
  t.equal(clock.dueAt(1999), dueMs(1999), 'the last sample before the skip');
  t.equal(clock.dueAt(2000), dueMs(2000 + 38_400), 'the first sample after it is due 0.8 s later');
  t.equal(clock.dueAt(2048), dueMs(2048 + 38_400), 'and every one after it');
  t.equal(clock.dueAt(50_000 + 100), dueMs(50_000 + 100 + 38_400), 'across later blocks that follow on');
  // A second skip moves the samples after it by both.
  clock.fed(2000 + 38_400 + 48_480 + 4800, 960);
  t.equal(clock.dueAt(50_480 + 10), dueMs(50_480 + 10 + 38_400 + 4800), 'two skips add up');
});

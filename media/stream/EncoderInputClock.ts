/**
 * When each sample an audio encoder took from the soundtrack mix was due. The encoder takes the
 * mix's blocks back to back and neither drops nor adds a sample, but the mix skips frames after a
 * stall longer than it makes up (SoundtrackMixer), so the encoder's input sample n is mix frame
 * first + n only until the first skip. Each block that does not follow on from the one before
 * notes where it starts; a sample's due time is read from the latest such note before it.
 *
 * Without this an AAC frame after a skip was stamped as early as the skip was long (0.8 s after a
 * 1.8 s stall), for good: the LL-HLS packager dropped every audio frame as early and padded
 * silence in its place, and the RTMP push carried the audio that far off the picture.
 */
export class EncoderInputClock {
  readonly #dueMs: (frame: number) => number;
  /** Input samples where a run of consecutive mix frames starts, oldest first (one at least once fed). */
  #runs: { input: number; frame: number }[] = [];
  /** Samples (stereo frames) handed to the encoder so far. */
  #input = 0;

  /** `dueMs`: the mix's clock (SoundtrackMixer.dueMs), performance.now() ms of a mix frame. */
  constructor(dueMs: (frame: number) => number) {
    this.#dueMs = dueMs;
  }

  /** A block of `frames` mix frames from mix frame `first` on went into the encoder. */
  fed(first: number, frames: number): void {
    const run = this.#runs[this.#runs.length - 1];
    if (!run || run.frame + (this.#input - run.input) !== first) this.#runs.push({ input: this.#input, frame: first });
    this.#input += frames;
  }

  /**
   * performance.now() ms when the encoder's input sample `input` was due. Asked in increasing
   * order (encoded frames come out in order): the runs before the one that holds it are let go.
   */
  dueAt(input: number): number {
    while (this.#runs.length > 1 && (this.#runs[1] as { input: number }).input <= input) this.#runs.shift();
    const run = this.#runs[0];
    return run ? this.#dueMs(run.frame + input - run.input) : this.#dueMs(input);
  }
}

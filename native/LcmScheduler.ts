/**
 * The LCM scheduler tables StreamDiffusion precomputes in `prepare()` (diffusers `LCMScheduler`,
 * modern `set_timesteps`), for the SD "scaled_linear" β schedule. All math in float64.
 * Reference: docs/reference live-diffusion.md §1.3.
 */
import { InvalidParamsError } from './errors.ts';

export interface LcmSchedulerOptions {
  /** Default 0.00085 (SD 1.x/2.x/XL). */
  betaStart?: number;
  /** Default 0.012. */
  betaEnd?: number;
  /** Default 1000. */
  numTrainTimesteps?: number;
  /** LCM `original_inference_steps`; default 50. */
  originalInferenceSteps?: number;
  /** LCM boundary-condition timestep scaling; default 10. */
  timestepScaling?: number;
  /** LCM σ_data; default 0.5. */
  sigmaData?: number;
}

/** Per-slot scalars for one `t_index_list`: slot i runs at `subTimesteps[i]`. */
export interface StepTables {
  /** All N timesteps of the grid, descending. */
  timesteps: number[];
  /** `timesteps[t_index_list[i]]`. */
  subTimesteps: number[];
  /** √ᾱ_t per slot. */
  alpha: number[];
  /** √(1−ᾱ_t) per slot. */
  beta: number[];
  cSkip: number[];
  cOut: number[];
}

export class LcmScheduler {
  /** ᾱ_t = Π(1−β_s), s ≤ t; index = train timestep. */
  readonly alphasCumprod: Float64Array;
  readonly #o: Required<LcmSchedulerOptions>;

  constructor(options: LcmSchedulerOptions = {}) {
    this.#o = {
      betaStart: options.betaStart ?? 0.00085,
      betaEnd: options.betaEnd ?? 0.012,
      numTrainTimesteps: options.numTrainTimesteps ?? 1000,
      originalInferenceSteps: options.originalInferenceSteps ?? 50,
      timestepScaling: options.timestepScaling ?? 10,
      sigmaData: options.sigmaData ?? 0.5,
    };
    const T = this.#o.numTrainTimesteps;
    this.alphasCumprod = new Float64Array(T);
    // scaled_linear: β = linspace(√β_start, √β_end, T)².
    const a = Math.sqrt(this.#o.betaStart);
    const b = Math.sqrt(this.#o.betaEnd);
    let prod = 1;
    for (let i = 0; i < T; i++) {
      const s = a + ((b - a) * i) / (T - 1);
      prod *= 1 - s * s;
      this.alphasCumprod[i] = prod;
    }
  }

  /**
   * The N-step LCM grid, descending. diffusers raises for N > original_inference_steps (50) while
   * Daydream's schema allows up to 100; we extend the grid instead (`orig = max(50, N)`), which is
   * identical to diffusers for N ≤ 50.
   */
  timesteps(numInferenceSteps: number): number[] {
    const N = numInferenceSteps;
    const T = this.#o.numTrainTimesteps;
    if (!Number.isInteger(N) || N < 1 || N > T) throw new InvalidParamsError(`num_inference_steps ${N} not in 1..${T}`);
    const orig = Math.max(this.#o.originalInferenceSteps, N);
    const k = Math.floor(T / orig);
    const origin: number[] = [];
    for (let i = 1; i <= orig; i++) origin.push(i * k - 1);
    origin.reverse();
    const out: number[] = [];
    for (let j = 0; j < N; j++) out.push(origin[Math.floor((j * orig) / N)] as number);
    return out;
  }

  /**
   * Tables for a `t_index_list`. Daydream's validator allows an index equal to N, which has no
   * timestep; we clamp indices to N−1 (the last, least noisy step).
   */
  tables(numInferenceSteps: number, tIndexList: readonly number[]): StepTables {
    if (tIndexList.length === 0) throw new InvalidParamsError('t_index_list is empty');
    const timesteps = this.timesteps(numInferenceSteps);
    const { timestepScaling, sigmaData } = this.#o;
    const subTimesteps: number[] = [];
    const alpha: number[] = [];
    const beta: number[] = [];
    const cSkip: number[] = [];
    const cOut: number[] = [];
    for (const idx of tIndexList) {
      if (!Number.isInteger(idx) || idx < 0) throw new InvalidParamsError(`t_index ${idx} must be a non-negative integer`);
      const t = timesteps[Math.min(idx, timesteps.length - 1)] as number;
      const ac = this.alphasCumprod[t] as number;
      subTimesteps.push(t);
      alpha.push(Math.sqrt(ac));
      beta.push(Math.sqrt(1 - ac));
      const st = t * timestepScaling;
      const sd2 = sigmaData * sigmaData;
      cSkip.push(sd2 / (st * st + sd2));
      cOut.push(st / Math.sqrt(st * st + sd2));
    }
    return { timesteps, subTimesteps, alpha, beta, cSkip, cOut };
  }
}

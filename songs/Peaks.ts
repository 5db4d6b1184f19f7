/** Waveform overview: `count` peaks, each max(|L|, |R|) over an equal slice, in [0, 1], 3 decimals. */
export function computePeaks(L: Float32Array, R: Float32Array, n: number, count = 200): number[] {
  const out: number[] = [];
  for (let k = 0; k < count; k++) {
    const a = Math.floor((k * n) / count);
    const b = Math.max(a + 1, Math.floor(((k + 1) * n) / count));
    let m = 0;
    for (let i = a; i < b && i < n; i++) {
      const x = Math.abs(L[i] as number);
      const y = Math.abs(R[i] as number);
      if (x > m) m = x;
      if (y > m) m = y;
    }
    out.push(Math.round(Math.min(1, m) * 1000) / 1000);
  }
  return out;
}

/**
 * A parser and linter for the Prometheus text exposition format (0.0.4), applying the checks of
 * `promtool check metrics` (client_golang's promlint) plus the format's own rules, so /metrics is
 * checked where the `prometheus` package is not installed:
 * - every family has HELP and TYPE; names and label names are valid; no camelCase;
 * - counters end in `_total`, nothing else does; no reserved suffix (`_count`, `_sum`, `_bucket`)
 *   on a family that is not a histogram/summary;
 * - base units only: no `milli`/`micro`/`nano`, `_ms`, `_percent`, `_kb`…;
 * - `quantile` only on summaries (we publish histograms instead);
 * - histograms: per series, `le` buckets non-decreasing in bound and count, a `+Inf` bucket equal
 *   to `_count`, and a `_sum`;
 * - no duplicate series; every value parses.
 * Returns the problems found (empty when clean) and the parsed families.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
export interface Family {
  name: string;
  help?: string;
  type?: string;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const NON_BASE_UNITS = /(^|_)(milli|micro|nano)|_(ms|us|ns|msec|millis|percent|pct|kb|mb|gb|kib|mib|gib|minutes|hours|days)(_|$)/;

function parseLabels(body: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  const re = /\s*([^=\s,]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?/gy;
  let m: RegExpExecArray | null;
  let at = 0;
  while (at < body.length && (m = re.exec(body))) {
    labels[m[1] as string] = (m[2] as string).replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    at = re.lastIndex;
  }
  if (at !== body.length) throw new Error(`bad labels in: ${line}`);
  return labels;
}

export function parseExposition(text: string): { families: Map<string, Family>; problems: string[] } {
  const families = new Map<string, Family>();
  const problems: string[] = [];
  const family = (name: string) => {
    let f = families.get(name);
    if (!f) families.set(name, (f = { name, samples: [] }));
    return f;
  };
  const familyOf = (sample: string) => {
    for (const suffix of ['_bucket', '_sum', '_count']) {
      if (sample.endsWith(suffix)) {
        const base = sample.slice(0, -suffix.length);
        const t = families.get(base)?.type;
        if (t === 'histogram' || t === 'summary') return base;
      }
    }
    return sample;
  };
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const meta = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
    if (meta) {
      const f = family(meta[2] as string);
      if (meta[1] === 'HELP') f.help = meta[3];
      else f.type = meta[3];
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = /^([^{\s]+)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    if (!m) {
      problems.push(`unparsable line: ${line}`);
      continue;
    }
    const name = m[1] as string;
    let labels: Record<string, string> = {};
    try {
      labels = parseLabels(m[2] ?? '', line);
    } catch (err) {
      problems.push((err as Error).message);
    }
    const raw = m[3] as string;
    const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw);
    if (raw !== 'NaN' && Number.isNaN(value)) problems.push(`bad value in: ${line}`);
    family(familyOf(name)).samples.push({ name, labels, value });
  }
  return { families, problems };
}

export function lintExposition(text: string): { problems: string[]; families: Map<string, Family> } {
  const { families, problems } = parseExposition(text);
  for (const f of families.values()) {
    const n = f.name;
    if (!NAME.test(n)) problems.push(`${n}: invalid metric name`);
    if (/[a-z][A-Z]/.test(n)) problems.push(`${n}: camelCase name (use snake_case)`);
    if (!f.help) problems.push(`${n}: no HELP`);
    if (!f.type) problems.push(`${n}: no TYPE`);
    if (f.type === 'counter' && !n.endsWith('_total')) problems.push(`${n}: counter names should end in _total`);
    if (f.type !== 'counter' && n.endsWith('_total')) problems.push(`${n}: non-counter names should not end in _total`);
    if (f.type !== 'histogram' && f.type !== 'summary' && /_(count|sum|bucket)$/.test(n)) problems.push(`${n}: reserved suffix on a ${f.type}`);
    if (NON_BASE_UNITS.test(n)) problems.push(`${n}: use base units (seconds, bytes, ratios), not ${NON_BASE_UNITS.exec(n)?.[0]}`);
    const seen = new Set<string>();
    for (const s of f.samples) {
      for (const l of Object.keys(s.labels)) if (!LABEL.test(l) || l.startsWith('__')) problems.push(`${s.name}: invalid label name ${l}`);
      if (f.type !== 'summary' && 'quantile' in s.labels) problems.push(`${s.name}: quantile label outside a summary (publish a histogram)`);
      const id = `${s.name}${JSON.stringify(Object.entries(s.labels).sort())}`;
      if (seen.has(id)) problems.push(`${s.name}: duplicate series ${JSON.stringify(s.labels)}`);
      seen.add(id);
    }
    if (f.type === 'histogram') problems.push(...lintHistogram(f));
  }
  return { problems, families };
}

function lintHistogram(f: Family): string[] {
  const problems: string[] = [];
  const series = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  const key = (labels: Record<string, string>) => JSON.stringify(Object.entries(labels).filter(([k]) => k !== 'le').sort());
  for (const s of f.samples) {
    const k = key(s.labels);
    let e = series.get(k);
    if (!e) series.set(k, (e = { buckets: [] }));
    if (s.name === `${f.name}_bucket`) {
      const le = s.labels['le'];
      if (le === undefined) problems.push(`${s.name}: bucket without le`);
      else e.buckets.push([le === '+Inf' ? Infinity : Number(le), s.value]);
    } else if (s.name === `${f.name}_sum`) e.sum = s.value;
    else if (s.name === `${f.name}_count`) e.count = s.value;
    else problems.push(`${s.name}: not a histogram line of ${f.name}`);
  }
  for (const [k, e] of series) {
    const where = `${f.name}${k}`;
    for (let i = 1; i < e.buckets.length; i++) {
      const [prevLe, prevN] = e.buckets[i - 1] as [number, number];
      const [le, n] = e.buckets[i] as [number, number];
      if (!(le > prevLe)) problems.push(`${where}: le not increasing (${prevLe} then ${le})`);
      if (n < prevN) problems.push(`${where}: bucket counts decrease (${prevN} then ${n})`);
    }
    const inf = e.buckets.at(-1);
    if (!inf || inf[0] !== Infinity) problems.push(`${where}: no +Inf bucket`);
    else if (e.count !== inf[1]) problems.push(`${where}: _count ${e.count} differs from the +Inf bucket ${inf[1]}`);
    if (e.sum === undefined) problems.push(`${where}: no _sum`);
  }
  return problems;
}

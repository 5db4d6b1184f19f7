/**
 * Prometheus metrics for one process. A registry per instance (not prom-client's global one) so
 * tests can build several apps in one process. Other parts register their own gauges on
 * `registry` through the helpers here.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type Metric } from 'prom-client';

/** What a custom collector hands the registry at scrape: the text format's lines as values. */
export interface CollectedMetric {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  /** `metricName` defaults to `name`; histogram lines use `<name>_bucket` (with `le`), `_sum`, `_count`. */
  values: { metricName?: string; labels: Record<string, string | number>; value: number }[];
}

export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly httpDuration: Histogram<'method' | 'route'>;

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    if (opts.defaultMetrics ?? true) {
      collectDefaultMetrics({ register: this.registry, prefix: 'reverie_' });
      // prom-client names three gauges `…_total`, which `promtool check metrics` rejects (only
      // counters end in _total). They count libuv handles/requests, rarely worth a dashboard.
      for (const gauge of ['active_resources_total', 'active_handles_total', 'active_requests_total']) this.registry.removeSingleMetric(`reverie_nodejs_${gauge}`);
    }
    this.httpRequests = new Counter({
      name: 'reverie_http_requests_total',
      help: 'HTTP requests answered, by route pattern and status.',
      labelNames: ['method', 'route', 'status'],
      registers: [this.registry],
    });
    this.httpDuration = new Histogram({
      name: 'reverie_http_request_duration_seconds',
      help: 'HTTP request latency in seconds, by route pattern.',
      labelNames: ['method', 'route'],
      // 0.5 ms … 10 s: API calls are fast, WHIP offers wait for ICE gathering.
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [this.registry],
    });
  }

  gauge<L extends string>(name: string, help: string, labelNames: readonly L[] = [], collect?: (g: Gauge<L>) => void | Promise<void>): Gauge<L> {
    const existing = this.registry.getSingleMetric(name);
    if (existing) return existing as Gauge<L>;
    return new Gauge<L>({
      name,
      help,
      labelNames: [...labelNames],
      registers: [this.registry],
      ...(collect ? { collect(this: Gauge<L>) { return collect(this); } } : {}),
    });
  }

  counter<L extends string>(name: string, help: string, labelNames: readonly L[] = [], collect?: (c: Counter<L>) => void | Promise<void>): Counter<L> {
    const existing = this.registry.getSingleMetric(name);
    if (existing) return existing as Counter<L>;
    return new Counter<L>({
      name,
      help,
      labelNames: [...labelNames],
      registers: [this.registry],
      ...(collect ? { collect(this: Counter<L>) { return collect(this); } } : {}),
    });
  }

  /**
   * A metric written out by our own code at scrape (prom-client's metric interface: `get()`
   * returns the values). For numbers another object already keeps in histogram form.
   */
  collector(metric: { name: string; get(): CollectedMetric | Promise<CollectedMetric> }): void {
    if (this.registry.getSingleMetric(metric.name)) return;
    this.registry.registerMetric(metric as unknown as Metric);
  }

  histogram<L extends string>(name: string, help: string, labelNames: readonly L[], buckets: number[]): Histogram<L> {
    const existing = this.registry.getSingleMetric(name);
    if (existing) return existing as Histogram<L>;
    return new Histogram<L>({ name, help, labelNames: [...labelNames], buckets, registers: [this.registry] });
  }
}

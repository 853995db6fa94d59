// Counters and histograms the request path feeds as plain numbers, which their prom-client
// metrics take up when they are read (a scrape, a test): each prom-client call hashes its label
// set and allocates, and the five calls per proxied request cost the gateway 12-15% of its CPU
// per request (measured with bench:proxy).
import { Counter, type Registry } from 'prom-client'

/** A count kept as a number on the request path; its prom-client counter adds it when read. */
export class Tally {
  pending = 0
  inc(): void {
    this.pending++
  }
}

/** A prom-client counter fed by tallies, one per label set (a label set of its own, or none). */
export function talliedCounter<L extends string>(
  config: { name: string; help: string; labelNames?: readonly L[]; registers: Registry[] },
  labelSets: readonly Partial<Record<L, string>>[] = [{}],
): Tally[] {
  const tallies = labelSets.map(() => new Tally())
  const counter = new Counter<L>({
    ...config,
    collect() {
      labelSets.forEach((labels, i) => {
        const tally = tallies[i]!
        if (tally.pending === 0) return
        this.inc(labels, tally.pending)
        tally.pending = 0
      })
    },
  })
  // registry.resetMetrics() resets the counter: what is pending goes too, or it would come back.
  const resetCounter = counter.reset.bind(counter)
  counter.reset = () => {
    for (const tally of tallies) tally.pending = 0
    resetCounter()
  }
  return tallies
}

/** A prom-client counter without labels, fed by one tally. */
export function tally(config: { name: string; help: string; registers: Registry[] }): Tally {
  return talliedCounter(config)[0]!
}

/** The latency histograms' bounds, in seconds: from a cached hit (tens of µs) to a slow upstream (the 30 s default timeout). */
export const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/** The OpenMetrics exemplar of a bucket: the last traced observation that fell in it. */
export interface Exemplar {
  readonly labelSet: { readonly trace_id: string }
  readonly value: number
  /** Seconds since the epoch. */
  readonly timestamp: number
}

/** One series of a LatencyHistogram: counts per bucket (the last one past every bound). */
export class LatencySeries {
  readonly counts: Float64Array
  sum = 0
  count = 0
  /** Per bucket, its exemplar; null until a traced request is observed (tracing off: always). */
  exemplars: (Exemplar | null)[] | null = null
  private readonly bounds: readonly number[]
  constructor(bounds: readonly number[]) {
    this.bounds = bounds
    this.counts = new Float64Array(bounds.length + 1)
  }

  /** A value that is not a finite number is dropped (it would turn the sum into NaN for good). */
  observe(seconds: number): void {
    if (!Number.isFinite(seconds)) return
    const bounds = this.bounds
    let i = 0
    while (i < bounds.length && seconds > bounds[i]!) i++
    this.counts[i]!++
    this.sum += seconds
    this.count++
  }

  /** observe, keeping the trace as the exemplar of the bucket the value fell in. */
  observeWithExemplar(seconds: number, traceId: string): void {
    if (!Number.isFinite(seconds)) return
    this.observe(seconds)
    const bounds = this.bounds
    let i = 0
    while (i < bounds.length && seconds > bounds[i]!) i++
    this.exemplars ??= new Array<Exemplar | null>(bounds.length + 1).fill(null)
    this.exemplars[i] = { labelSet: { trace_id: traceId }, value: seconds, timestamp: Date.now() / 1000 }
  }
}

/**
 * A histogram for the request path, registered as a prom-client metric: it is read as prom-client
 * reads its own (`get()`, the same values and names), but observing is a bucket search and three
 * additions. One series per value of its one label, or a single series without labels.
 */
export class LatencyHistogram {
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  private readonly series: Map<string, LatencySeries>
  /** The series of a histogram without a label (observe's, with no lookup); null with a label. */
  private readonly only: LatencySeries | null

  readonly name: string
  readonly help: string
  private readonly bounds: readonly number[]
  private readonly label: { name: string; values: readonly string[] } | null
  constructor(
    name: string,
    help: string,
    bounds: readonly number[],
    registry: Registry,
    label: { name: string; values: readonly string[] } | null = null,
  ) {
    this.name = name
    this.help = help
    this.bounds = bounds
    this.label = label
    this.series = new Map((label?.values ?? ['']).map((value) => [value, new LatencySeries(bounds)]))
    this.only = label === null ? this.series.get('')! : null
    registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0])
  }

  /** The series of one label value (looked up once, not per request). */
  of(labelValue = ''): LatencySeries {
    const series = this.series.get(labelValue)
    if (series === undefined) {
      throw new Error(
        `${this.name}: no series ${this.label === null ? 'with a label (it has none)' : `${this.label.name}="${labelValue}"`}`,
      )
    }
    return series
  }

  /** For a histogram without a label; one with a label is observed through of(value). */
  observe(seconds: number): void {
    if (this.only === null) throw new Error(`${this.name}: observe through of(${this.label!.name})`)
    this.only.observe(seconds)
  }

  reset(): void {
    for (const series of this.series.values()) {
      series.exemplars = null
      series.counts.fill(0)
      series.sum = 0
      series.count = 0
    }
  }

  /** prom-client's shape: cumulative buckets with `le`, then _sum and _count, per series seen. */
  async get() {
    const values: {
      labels: Record<string, string | number>
      value: number
      metricName: string
      exemplar?: Exemplar | null
    }[] = []
    for (const [labelValue, series] of this.series) {
      if (this.label !== null && series.count === 0) continue
      const labels: Record<string, string> = this.label === null ? {} : { [this.label.name]: labelValue }
      let cumulative = 0
      this.bounds.forEach((bound, i) => {
        cumulative += series.counts[i]!
        values.push({
          labels: { le: bound, ...labels },
          value: cumulative,
          metricName: `${this.name}_bucket`,
          exemplar: series.exemplars?.[i] ?? null,
        })
      })
      values.push({
        labels: { le: '+Inf', ...labels },
        value: series.count,
        metricName: `${this.name}_bucket`,
        exemplar: series.exemplars?.[this.bounds.length] ?? null,
      })
      values.push({ labels, value: series.sum, metricName: `${this.name}_sum` })
      values.push({ labels, value: series.count, metricName: `${this.name}_count` })
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }
}

// Prometheus metrics (DESIGN §9), one registry per app so that several gateways in one process
// (tests, benches) keep their own counts. Served on METRICS_PORT by main.ts, never publicly.
import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client'

/** Which part of the gateway answered a request. `none`: no route matched (a 404, a bad path). */
export type RouteKind = 'management' | 'proxy' | 'ops' | 'none'
export const ROUTE_KINDS: readonly RouteKind[] = ['management', 'proxy', 'ops', 'none']
const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const

/** Seconds: from a cached hit (tens of µs) to a slow upstream (the 30 s default timeout). */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

// The request path counts into plain numbers, which prom-client's metrics take up when they are
// read (a scrape, a test): each prom-client call hashes its label set and allocates, and the five
// calls per proxied request cost the gateway 12-15% of its CPU per request (bench/RESULTS.md).

/** A count kept as a number on the request path; its prom-client counter adds it when read. */
export class Tally {
  pending = 0
  inc(): void {
    this.pending++
  }
}

/** A prom-client counter fed by tallies, one per label set (a label set of its own, or none). */
function talliedCounter<L extends string>(
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
function tally(config: { name: string; help: string; registers: Registry[] }): Tally {
  return talliedCounter(config)[0]!
}

/** One series of a LatencyHistogram: counts per bucket (the last one past every bound). */
export class LatencySeries {
  readonly counts: Float64Array
  sum = 0
  count = 0
  constructor(private readonly bounds: readonly number[]) {
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

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly bounds: readonly number[],
    registry: Registry,
    private readonly label: { name: string; values: readonly string[] } | null = null,
  ) {
    this.series = new Map((label?.values ?? ['']).map((value) => [value, new LatencySeries(bounds)]))
    this.only = label === null ? this.series.get('')! : null
    registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0])
  }

  /** The series of one label value (looked up once, not per request). */
  of(labelValue = ''): LatencySeries {
    const series = this.series.get(labelValue)
    if (series === undefined) {
      throw new Error(`${this.name}: no series ${this.label === null ? 'with a label (it has none)' : `${this.label.name}="${labelValue}"`}`)
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
      series.counts.fill(0)
      series.sum = 0
      series.count = 0
    }
  }

  /** prom-client's shape: cumulative buckets with `le`, then _sum and _count, per series seen. */
  async get() {
    const values: { labels: Record<string, string | number>; value: number; metricName: string; exemplar?: null }[] = []
    for (const [labelValue, series] of this.series) {
      if (this.label !== null && series.count === 0) continue
      const labels: Record<string, string> = this.label === null ? {} : { [this.label.name]: labelValue }
      let cumulative = 0
      this.bounds.forEach((bound, i) => {
        cumulative += series.counts[i]!
        values.push({ labels: { le: bound, ...labels }, value: cumulative, metricName: `${this.name}_bucket`, exemplar: null })
      })
      values.push({ labels: { le: '+Inf', ...labels }, value: series.count, metricName: `${this.name}_bucket`, exemplar: null })
      values.push({ labels, value: series.sum, metricName: `${this.name}_sum` })
      values.push({ labels, value: series.count, metricName: `${this.name}_count` })
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }
}

export interface Metrics {
  readonly registry: Registry
  /** Lookups the in-process cache could not answer, by the tier that answered them. */
  readonly storeLookups: { readonly redis: Counter.Internal; readonly postgres: Counter.Internal }
  readonly cacheHits: { readonly local: Counter.Internal; readonly redis: Counter.Internal }
  readonly cacheMisses: { readonly local: Counter.Internal; readonly redis: Counter.Internal }
  /** Background refreshes started for in-process entries in use, failed ones included (cache/tiered.ts). */
  readonly cacheRefreshes: Counter
  readonly invalidationsReceived: Counter
  readonly redisErrors: Counter
  /** 1 while the connection is ready, by connection (commands, subscriber). */
  readonly redisUp: { readonly commands: Gauge.Internal<'connection'>; readonly subscriber: Gauge.Internal<'connection'> }
  readonly proxiedRequests: Tally
  /** Proxied requests admitted from an identical admission of the last second (no lookup at all). */
  readonly recentAdmissions: Tally
  /** Records one answered request. */
  observeRequest(kind: RouteKind, statusCode: number, seconds: number): void
  readonly upstreamDuration: LatencyHistogram
  readonly usageFlushFailures: Counter
  /** Set by the app: how old the oldest count not yet in Postgres is, in ms (0: none pending). */
  usageLagMs: () => number
  /** The most connections the Postgres pool opens (set by the app; absent for the embedded one). */
  readonly postgresPoolMax: Gauge
  /**
   * Set by the app: this process's Postgres connections by state (active, idle, idle in
   * transaction…) as Postgres sees them; null when they cannot be told.
   */
  postgresConnections: () => Promise<Record<string, number> | null>
}

export function createMetrics(options: { processMetrics?: boolean } = {}): Metrics {
  const registry = new Registry()
  if (options.processMetrics) collectDefaultMetrics({ register: registry })
  const registers = [registry]

  const storeLookups = new Counter({
    name: 'tgw_store_lookups_total',
    help: 'Tenancy lookups that missed the in-process cache, by the tier that answered (redis, postgres)',
    labelNames: ['tier'] as const,
    registers,
  })
  const cacheHits = new Counter({
    name: 'tgw_cache_hits_total',
    help: 'Tenancy lookups a cache tier answered (local: in-process, redis)',
    labelNames: ['tier'] as const,
    registers,
  })
  const cacheMisses = new Counter({
    name: 'tgw_cache_misses_total',
    help: 'Tenancy lookups a cache tier could not answer (redis: absent, failed or skipped while down)',
    labelNames: ['tier'] as const,
    registers,
  })
  const redisUp = new Gauge({
    name: 'tgw_redis_up',
    help: '1 while the Redis connection is ready, else 0 (absent without REDIS_URL)',
    labelNames: ['connection'] as const,
    registers,
  })

  // By kind, then status class: requestTallies[kind index * 5 + class index].
  const requestLabelSets = ROUTE_KINDS.flatMap((kind) => STATUS_CLASSES.map((cls) => ({ kind, status_class: cls })))
  const requestTallies = talliedCounter(
    {
      name: 'tgw_http_requests_total',
      help: 'Answered requests by route kind (management, proxy, ops, none) and status class',
      labelNames: ['kind', 'status_class'] as const,
      registers,
    },
    requestLabelSets,
  )
  const kindIndex = Object.fromEntries(ROUTE_KINDS.map((kind, i) => [kind, i])) as Record<RouteKind, number>
  const duration = new LatencyHistogram(
    'tgw_http_request_duration_seconds',
    'Time from the request to the end of the response, by route kind',
    LATENCY_BUCKETS,
    registry,
    { name: 'kind', values: ROUTE_KINDS },
  )
  const durations = ROUTE_KINDS.map((kind) => duration.of(kind))

  const metrics: Metrics = {
    registry,
    storeLookups: { redis: storeLookups.labels('redis'), postgres: storeLookups.labels('postgres') },
    cacheHits: { local: cacheHits.labels('local'), redis: cacheHits.labels('redis') },
    cacheMisses: { local: cacheMisses.labels('local'), redis: cacheMisses.labels('redis') },
    cacheRefreshes: new Counter({
      name: 'tgw_cache_refreshes_total',
      help: 'Background refreshes started for in-process entries in use, before they expired (failed ones included)',
      registers,
    }),
    invalidationsReceived: new Counter({
      name: 'tgw_cache_invalidations_received_total',
      help: 'Invalidation messages received from the Redis bus (each names one or more entries)',
      registers,
    }),
    redisErrors: new Counter({
      name: 'tgw_redis_errors_total',
      help: 'Redis commands that failed or timed out (the gateway fell back to Postgres)',
      registers,
    }),
    redisUp: { commands: redisUp.labels('commands'), subscriber: redisUp.labels('subscriber') },
    proxiedRequests: tally({
      name: 'tgw_proxied_requests_total',
      help: 'Requests answered on a proxied route (by the upstream or by the gateway)',
      registers,
    }),
    recentAdmissions: tally({
      name: 'tgw_recent_admissions_total',
      help: 'Proxied requests admitted from an identical admission of the last second, without a cache lookup',
      registers,
    }),
    observeRequest(kind, statusCode, seconds) {
      const k = kindIndex[kind]
      const cls = Math.floor(statusCode / 100) - 1
      if (cls >= 0 && cls < STATUS_CLASSES.length) requestTallies[k * STATUS_CLASSES.length + cls]!.inc()
      durations[k]!.observe(seconds)
    },
    upstreamDuration: new LatencyHistogram(
      'tgw_upstream_duration_seconds',
      'Time from sending a proxied request to the upstream to its response headers',
      LATENCY_BUCKETS,
      registry,
    ),
    usageFlushFailures: new Counter({
      name: 'tgw_usage_flush_failures_total',
      help: 'Usage flushes to Postgres that failed (their counts are kept and retried)',
      registers,
    }),
    usageLagMs: () => 0,
    postgresPoolMax: new Gauge({
      name: 'tgw_postgres_pool_max',
      help: 'The most Postgres connections this process opens',
      registers,
    }),
    postgresConnections: async () => null,
  }

  new Gauge({
    name: 'tgw_usage_flush_lag_seconds',
    help: 'Age of the oldest usage count not yet written to Postgres (0 when none is pending)',
    registers,
    collect() {
      this.set(metrics.usageLagMs() / 1000)
    },
  })
  new Gauge({
    name: 'tgw_postgres_connections',
    help: "This process's Postgres connections by state, as pg_stat_activity reports them at scrape time",
    labelNames: ['state'] as const,
    registers,
    async collect() {
      const byState = await metrics.postgresConnections().catch(() => null)
      this.reset()
      if (byState === null) return
      for (const [state, count] of Object.entries(byState)) this.labels(state).set(count)
    },
  })
  return metrics
}

/** `GET /metrics` on its own port (DESIGN §2: never on the public one). */
export async function serveMetrics(registry: Registry, port: number, host: string): Promise<Server> {
  const server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      response.writeHead(404).end()
      return
    }
    registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text),
      () => response.writeHead(500).end(),
    )
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => resolve())
  })
  return server
}

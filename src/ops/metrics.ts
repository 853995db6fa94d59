// Prometheus metrics (docs/operations.md), one registry per app so that several gateways in one process
// (tests, benches) keep their own counts. Served on METRICS_PORT by main.ts (ops/metrics-server.ts),
// never publicly. A concern's own family is defined apart (cache/metrics.ts, proxy/metrics.ts,
// limits/metrics.ts, auth/credential-metrics.ts, ops/webhook-metrics.ts) and gathered here; defined
// here are only the gateway's as a whole: requests by route kind, waits on Redis, usage flushes,
// the Postgres pool.
import { Counter, Gauge, Registry } from 'prom-client'
import { type CacheMetrics, cacheMetrics } from '../cache/metrics.js'
import { LATENCY_BUCKETS, LatencyHistogram, talliedCounter } from '../shared/fast-metrics.js'
import { type CredentialMetrics, credentialMetrics } from '../auth/credential-metrics.js'
import { type LimitMetrics, limitMetrics } from '../limits/metrics.js'
import { collectProcessMetrics } from './process-metrics.js'
import { type ProxyMetrics, proxyMetrics } from '../proxy/metrics.js'
import { type WebhookMetrics, webhookMetrics } from './webhook-metrics.js'
import { ROUTE_KINDS, type RouteKind } from '../http/route-kind.js'

// The kinds of metric the Metrics interface holds besides prom-client's own.
export { LatencyHistogram, Tally } from '../shared/fast-metrics.js'

const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const

export interface Metrics {
  readonly registry: Registry
  /** Tenancy lookups (cache/): cache tiers, Redis connections and masters, queries sent to Postgres. */
  readonly cache: CacheMetrics
  /** The proxy (proxy/): proxied requests, recent admissions, client aborts, upstream time, slots, WebSockets. */
  readonly proxy: ProxyMetrics
  /** Limits (limits/limiter.ts): decisions by policy and outcome, lease calls, degraded mode. */
  readonly limits: LimitMetrics
  /** Credentials (oauth/, signing-keys/, identity/): signatures made, access tokens verified. */
  readonly credentials: CredentialMetrics
  /** Webhook deliveries (webhooks/): attempts by outcome, the oldest due delivery's wait. */
  readonly webhooks: WebhookMetrics
  /** Records one answered request; `traceId`, a sampled trace's, is kept as its bucket's exemplar. */
  observeRequest(kind: RouteKind, statusCode: number, seconds: number, traceId?: string | null): void
  readonly usageFlushFailures: Counter
  /** Usage counts Postgres refused for their data, dropped from their flush (usage/meter-flush.ts). */
  readonly usageFlushRowsRefused: Counter
  /** Set by the usage meter (usage/meter-plugin.ts): how old the oldest count not yet in Postgres is, in ms (0: none pending). */
  usageLagMs: () => number
  /** Set by the usage export's push (usage/exporter.ts): how far behind it is, in seconds. */
  readonly usageExportLag: Gauge
  /** The most connections the Postgres pool opens (set by ops/metrics-plugin.ts; absent for the embedded one). */
  readonly postgresPoolMax: Gauge
  /**
   * Set by ops/metrics-plugin.ts: this process's Postgres connections by state (active, idle, idle in
   * transaction…) as Postgres sees them; null when they cannot be told.
   */
  postgresConnections: () => Promise<Record<string, number> | null>
}

export function createMetrics(options: { processMetrics?: boolean } = {}): Metrics {
  const registry = new Registry()
  if (options.processMetrics) collectProcessMetrics(registry)
  const registers = [registry]

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

  // How long a request waited on Redis: a tenancy lookup before it had the entry or went on to
  // Postgres (cache/tiered.ts), or a limit for its lease (proxy/limit-gate.ts).
  const redisWait = new LatencyHistogram(
    'tgw_redis_wait_seconds',
    'Time a request waited on Redis: a tenancy lookup (for the entry, before Postgres) or a limit (for its lease), by wait',
    LATENCY_BUCKETS,
    registry,
    { name: 'wait', values: ['lookup', 'lease'] },
  )

  const metrics: Metrics = {
    registry,
    cache: { ...cacheMetrics(registers), lookupWait: redisWait.of('lookup') },
    proxy: proxyMetrics(registry),
    limits: { ...limitMetrics(registers), leaseWait: redisWait.of('lease') },
    credentials: credentialMetrics(registers),
    webhooks: webhookMetrics(registers),
    observeRequest(kind, statusCode, seconds, traceId) {
      const k = kindIndex[kind]
      const cls = Math.floor(statusCode / 100) - 1
      if (cls >= 0 && cls < STATUS_CLASSES.length) requestTallies[k * STATUS_CLASSES.length + cls]!.inc()
      if (traceId == null) durations[k]!.observe(seconds)
      else durations[k]!.observeWithExemplar(seconds, traceId)
    },
    usageFlushFailures: new Counter({
      name: 'tgw_usage_flush_failures_total',
      help: 'Usage flushes to Postgres that failed (their counts are kept and retried)',
      registers,
    }),
    usageFlushRowsRefused: new Counter({
      name: 'tgw_usage_flush_rows_refused_total',
      help: 'Usage counts Postgres refused for their data: dropped, and the rest of their flush written',
      registers,
    }),
    usageLagMs: () => 0,
    usageExportLag: new Gauge({
      name: 'tgw_usage_export_lag_seconds',
      help: 'Seconds from the end of the oldest closed usage period with a record the receiver has not acknowledged to now (0: none, or no push)',
      registers,
    }),
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

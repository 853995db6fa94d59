// Prometheus metrics (docs/operations.md), one registry per app so that several gateways in one process
// (tests, benches) keep their own counts. Served on METRICS_PORT by main.ts, never publicly.
import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Registry } from 'prom-client'
import { LatencyHistogram, type LatencySeries, talliedCounter, tally, type Tally } from './fast-metrics.js'
import { type CredentialMetrics, credentialMetrics } from './credential-metrics.js'
import { type LimitMetrics, limitMetrics } from '../limits/metrics.js'
import { collectProcessMetrics } from './process-metrics.js'
import { type WebhookMetrics, webhookMetrics } from './webhook-metrics.js'

export { LIMIT_POLICIES, type LimitMetrics } from '../limits/metrics.js'

// The kinds of metric the Metrics interface holds besides prom-client's own.
export { LatencyHistogram, Tally } from './fast-metrics.js'

/** Which part of the gateway answered a request. `none`: no route matched (a 404, a bad path). */
export type RouteKind = 'management' | 'proxy' | 'token' | 'ops' | 'none'
export const ROUTE_KINDS: readonly RouteKind[] = ['management', 'proxy', 'token', 'ops', 'none']
const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const

/** Seconds: from a cached hit (tens of µs) to a slow upstream (the 30 s default timeout). */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

export interface Metrics {
  readonly registry: Registry
  /**
   * redis: lookups the in-process cache missed and Redis answered. postgres: queries the lookups
   * sent to Postgres, answered or not; key lookups share paced queries (store/key-lookup-batcher.ts).
   */
  readonly storeLookups: { readonly redis: Counter.Internal; readonly postgres: Counter.Internal }
  /** Key digests the Postgres key queries asked for (over tier="postgres": digests per query). */
  readonly postgresKeyDigests: Counter
  /** Client ids the token endpoint's paced Postgres queries asked for. */
  readonly postgresClientIds: Counter
  readonly cacheHits: { readonly local: Counter.Internal; readonly redis: Counter.Internal }
  readonly cacheMisses: { readonly local: Counter.Internal; readonly redis: Counter.Internal }
  /** Background refreshes started for in-process entries in use, failed ones included (cache/tiered.ts). */
  readonly cacheRefreshes: Counter
  readonly invalidationsReceived: Counter
  readonly redisErrors: Counter
  /** 1 while the connection is ready, by connection (commands, subscriber). */
  readonly redisUp: {
    readonly commands: Gauge.Internal<'connection'>
    readonly subscriber: Gauge.Internal<'connection'>
  }
  /** 1 for each Redis master the gateway's commands go to now, by address (cache/redis-masters.ts). */
  readonly redisMaster: Gauge<'address'>
  /** Changes of master (a failover, or a cluster's master replaced) seen since the start. */
  readonly redisMasterChanges: Counter
  readonly proxiedRequests: Tally
  /** Proxied requests admitted from an identical admission of the last second (no lookup at all). */
  readonly recentAdmissions: Tally
  /**
   * Proxied exchanges the client ended before its answer was complete: it hung up, or it stopped
   * reading and was cut off (proxy/exchange.ts). Not answered, so in no status class and no usage.
   */
  readonly clientAborts: { readonly hungUp: Tally; readonly stoppedReading: Tally }
  /**
   * Each proxied route's upstream slots, read at scrape time: the proxy registers a reader per
   * route (proxy/plugin.ts), `tgw_proxy_upstream_slots{route, state="held"|"waiting"}`.
   */
  readonly upstreamSlots: Map<string, () => { held: number; waiting: number }>
  /** Open WebSockets of a route prefix, read at scrape time (set by app.ts when a route carries them). */
  openWebSockets: ((route: string) => number) | null
  /** The route prefixes with `websocket: true`, for tgw_websockets_open. */
  readonly webSocketRoutes: string[]
  /** Limits (limits/limiter.ts): decisions by policy and outcome, lease calls, degraded mode. */
  readonly limits: LimitMetrics
  /** Credentials (oauth/, signing-keys/, identity/): signatures made, access tokens verified. */
  readonly credentials: CredentialMetrics
  /** Webhook deliveries (webhooks/): attempts by outcome, the oldest due delivery's wait. */
  readonly webhooks: WebhookMetrics
  /** Records one answered request. */
  observeRequest(kind: RouteKind, statusCode: number, seconds: number): void
  readonly upstreamDuration: LatencyHistogram
  /**
   * How long a request waited on Redis: a tenancy lookup before it had the entry or went on to
   * Postgres (cache/tiered.ts), or a limit for its lease (limits/gate.ts).
   */
  readonly redisWait: { readonly lookup: LatencySeries; readonly lease: LatencySeries }
  readonly usageFlushFailures: Counter
  /** Set by the usage meter (usage/meter-plugin.ts): how old the oldest count not yet in Postgres is, in ms (0: none pending). */
  usageLagMs: () => number
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

  const storeLookups = new Counter({
    name: 'tgw_store_lookups_total',
    help: 'Tenancy lookups that missed the in-process cache: redis, those Redis answered; postgres, the queries sent to Postgres (one per batch of key digests)',
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

  const redisWait = new LatencyHistogram(
    'tgw_redis_wait_seconds',
    'Time a request waited on Redis: a tenancy lookup (for the entry, before Postgres) or a limit (for its lease), by wait',
    LATENCY_BUCKETS,
    registry,
    { name: 'wait', values: ['lookup', 'lease'] },
  )

  const metrics: Metrics = {
    registry,
    storeLookups: { redis: storeLookups.labels('redis'), postgres: storeLookups.labels('postgres') },
    postgresKeyDigests: new Counter({
      name: 'tgw_postgres_key_digests_total',
      help: 'Key digests looked up in Postgres; several share one query under load (tgw_store_lookups_total{tier="postgres"})',
      registers,
    }),
    postgresClientIds: new Counter({
      name: 'tgw_postgres_client_ids_total',
      help: 'Client ids of token requests looked up in Postgres; several share one query under load (tgw_store_lookups_total{tier="postgres"})',
      registers,
    }),
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
    redisMaster: new Gauge({
      name: 'tgw_redis_master',
      help: "1 for each Redis master the gateway's commands go to now, by host:port (one, or a cluster's masters)",
      labelNames: ['address'] as const,
      registers,
    }),
    redisMasterChanges: new Counter({
      name: 'tgw_redis_master_changes_total',
      help: 'Times the Redis master (or a cluster master) changed since the start: failovers seen',
      registers,
    }),
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
    clientAborts: clientAbortTallies(registers),
    upstreamSlots: new Map(),
    openWebSockets: null,
    webSocketRoutes: [],
    limits: { ...limitMetrics(registers), leaseWait: redisWait.of('lease') },
    credentials: credentialMetrics(registers),
    webhooks: webhookMetrics(registers),
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
    redisWait: { lookup: redisWait.of('lookup'), lease: redisWait.of('lease') },
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
    name: 'tgw_proxy_upstream_slots',
    help: "Requests holding a route's upstream connection (held) or waiting for one (waiting), by route prefix",
    labelNames: ['route', 'state'] as const,
    registers,
    collect() {
      this.reset()
      for (const [route, read] of metrics.upstreamSlots) {
        const { held, waiting } = read()
        this.set({ route, state: 'held' }, held)
        this.set({ route, state: 'waiting' }, waiting)
      }
    },
  })
  new Gauge({
    name: 'tgw_websockets_open',
    help: 'WebSockets open through this replica, by route prefix',
    labelNames: ['route'] as const,
    registers,
    collect() {
      this.reset()
      const read = metrics.openWebSockets
      if (read === null) return
      for (const route of metrics.webSocketRoutes) this.set({ route }, read(route))
    },
  })
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

/** What the metrics listener answers for the health paths: the public app's own answer. */
export type ProbeAnswer = (path: '/healthz' | '/readyz') => Promise<{
  statusCode: number
  headers: Record<string, unknown>
  body: string
}>

/**
 * `GET /metrics` on its own port (docs/configuration.md: never on the public one), and the health
 * paths too when `probe` is given (docs/operations.md): the kubelet's probes then do not compete
 * with clients for the public listener's connections, which MAX_CONNECTIONS caps.
 */
export async function serveMetrics(
  registry: Registry,
  port: number,
  host: string,
  probe?: ProbeAnswer,
): Promise<Server> {
  const server = createServer((request, response) => {
    const path = request.url?.split('?')[0]
    if (request.method === 'GET' && probe !== undefined && (path === '/healthz' || path === '/readyz')) {
      probe(path).then(
        (answer) => {
          const type = answer.headers['content-type']
          response
            .writeHead(answer.statusCode, typeof type === 'string' ? { 'content-type': type } : {})
            .end(answer.body)
        },
        () => response.writeHead(500).end(),
      )
      return
    }
    if (request.method !== 'GET' || path !== '/metrics') {
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

function clientAbortTallies(registers: Registry[]): Metrics['clientAborts'] {
  const [hungUp, stoppedReading] = talliedCounter(
    {
      name: 'tgw_client_aborts_total',
      help: 'Proxied exchanges the client ended early: hung up, or stopped reading and was cut off',
      labelNames: ['reason'] as const,
      registers,
    },
    [{ reason: 'hung_up' }, { reason: 'stopped_reading' }],
  )
  return { hungUp: hungUp!, stoppedReading: stoppedReading! }
}

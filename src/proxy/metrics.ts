// The proxy's metrics (docs/operations.md): requests answered on proxied routes, admissions from
// the last second's memory, clients that ended early, the time to the upstream's headers, and each
// route's upstream slots and open WebSockets read at scrape time. Here rather than in
// ops/metrics.ts, as limits/ keeps its own; fed on every proxied request, so through shared/fast-metrics.ts.
import { Counter, Gauge, type Registry } from 'prom-client'
import { LATENCY_BUCKETS, LatencyHistogram, talliedCounter, tally, type Tally } from '../shared/fast-metrics.js'
import type { ClientAbortTallies } from './exchange.js'
import type { BadReportCounter } from './meter-reports.js'
import type { ProxyRoute } from './route.js'
import { cellTargetUrls } from './upstreams/route-cells.js'
import type { SocketBalancer, UpstreamsReadout } from './upstreams/route-upstreams.js'
import type { RetryCounters } from './upstreams/retry-call.js'
import { type RetriedReason, RETRY_REASONS } from './upstreams/retry-options.js'

export interface ProxyMetrics {
  readonly proxiedRequests: Tally
  /** Proxied requests admitted from an identical admission of the last second (no lookup at all). */
  readonly recentAdmissions: Tally
  /**
   * Proxied exchanges the client ended before its answer was complete: it hung up, or it stopped
   * reading and was cut off (proxy/exchange.ts). Not answered, so in no status class and no usage.
   */
  readonly clientAborts: ClientAbortTallies
  readonly upstreamDuration: LatencyHistogram
  /**
   * Each proxied route's upstream slots, read at scrape time: the proxy registers a reader per
   * route (proxy/plugin.ts), `tgw_proxy_upstream_slots{route, state="held"|"waiting"}`.
   */
  readonly upstreamSlots: Map<string, () => { held: number; waiting: number }>
  /** Open WebSockets of a route prefix, read at scrape time (set by app.ts when a route carries them). */
  openWebSockets: ((route: string) => number) | null
  /** The route prefixes with `websocket: true`, for tgw_websockets_open. */
  readonly webSocketRoutes: string[]
  /** The targets of each route that has them, read at scrape time (tgw_upstream_target_up, tgw_upstream_panic). */
  readonly upstreamTargets: Map<string, UpstreamsReadout & SocketBalancer>
  /** Targets taken out by passive health, by route prefix and target URL. */
  readonly upstreamEjections: Counter<'route' | 'target'>
  /** Upstream requests sent again (upstreams/retry-call.ts), by route prefix and what failed. */
  readonly upstreamRetries: Counter<'route' | 'reason'>
  /** Retries the route's budget refused, by route prefix. */
  readonly retryBudgetExhausted: Counter<'route'>
  /** Reports of units an upstream sent that were not whole numbers from 0 to 10^12 (proxy/meter-reports.ts). */
  readonly meterBadReports: Counter<'route' | 'meter'>
}

export function proxyMetrics(registry: Registry): ProxyMetrics {
  const registers = [registry]
  const metrics: ProxyMetrics = {
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
    upstreamDuration: new LatencyHistogram(
      'tgw_upstream_duration_seconds',
      'Time from sending a proxied request to the upstream to its response headers',
      LATENCY_BUCKETS,
      registry,
    ),
    upstreamSlots: new Map(),
    upstreamTargets: new Map(),
    // Rare (a failing target), so a labelled counter of prom-client's.
    upstreamEjections: new Counter({
      name: 'tgw_upstream_ejections_total',
      help: "Times a route's target was taken out by passive health (failures in a row), by route prefix and target",
      labelNames: ['route', 'target'] as const,
      registers,
    }),
    // Rare (a failing upstream): labelled counters of prom-client's.
    upstreamRetries: new Counter({
      name: 'tgw_upstream_retries_total',
      help: 'Upstream requests sent again after a failure, by route prefix and reason (connect_failure, reset, 502, 503, 504, per_try_timeout)',
      labelNames: ['route', 'reason'] as const,
      registers,
    }),
    retryBudgetExhausted: new Counter({
      name: 'tgw_upstream_retry_budget_exhausted_total',
      help: "Retries not made because the route's retry budget was spent, by route prefix",
      labelNames: ['route'] as const,
      registers,
    }),
    openWebSockets: null,
    webSocketRoutes: [],
    // Rare (a misbehaving upstream): a labelled counter of prom-client's, not a tally.
    meterBadReports: new Counter({
      name: 'tgw_meter_bad_reports_total',
      help: 'Reports of units from an upstream that were ignored (not a whole number from 0 to 10^12), by route prefix and meter',
      labelNames: ['route', 'meter'] as const,
      registers,
    }),
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
    name: 'tgw_upstream_target_up',
    help: "1 when a route's target may take requests (not ejected, passing its health checks), else 0; cell empty for a route without cells",
    labelNames: ['route', 'cell', 'target'] as const,
    registers,
    collect() {
      this.reset()
      for (const [route, readout] of metrics.upstreamTargets)
        for (const { target, cell, up } of readout.readTargets()) this.set({ route, cell, target }, up ? 1 : 0)
    },
  })
  new Gauge({
    name: 'tgw_upstream_panic',
    help: '1 when every target of a route is out, so that its requests go to all of them',
    labelNames: ['route'] as const,
    registers,
    collect() {
      this.reset()
      for (const [route, readout] of metrics.upstreamTargets) this.set({ route }, readout.panic() ? 1 : 0)
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
  return metrics
}

/** Counts a route's ejections; every target's series starts at 0, so that it shows before the first. */
export function ejectionCounter(metrics: ProxyMetrics, routes: readonly ProxyRoute[]): EjectionCounter {
  const counter = metrics.upstreamEjections
  for (const route of routes)
    for (const url of [...(route.targets?.targets.map((target) => target.url) ?? []), ...cellTargetUrls(route.cells)])
      counter.inc({ route: route.prefix, target: url }, 0)
  return (route, target) => counter.inc({ route, target })
}

/** Counts one ejection of a route's target (tgw_upstream_ejections_total). */
export type EjectionCounter = (route: string, target: string) => void

/**
 * Each retrying route's counters, by prefix; every reason it retries, and its budget, start at 0,
 * so that they show before the first.
 */
export function retryCounters(metrics: ProxyMetrics, routes: readonly ProxyRoute[]): (route: string) => RetryCounters {
  const byRoute = new Map<string, RetryCounters>()
  for (const route of routes) {
    if (route.retries.attempts === 0) continue
    const prefix = route.prefix
    const retried: RetriedReason[] = RETRY_REASONS.filter((reason) => route.retries.on.has(reason))
    // An attempt past per_try_timeout_ms is retried as its 504.
    if (route.retries.perTryTimeoutMs !== null && route.retries.on.has('504')) retried.push('per_try_timeout')
    const reasons = new Map(
      retried.map((reason) => {
        const child = metrics.upstreamRetries.labels({ route: prefix, reason })
        child.inc(0)
        return [reason, child] as const
      }),
    )
    const exhausted = metrics.retryBudgetExhausted.labels({ route: prefix })
    exhausted.inc(0)
    byRoute.set(prefix, {
      retried: (reason) => reasons.get(reason)?.inc(),
      exhausted: () => exhausted.inc(),
    })
  }
  return (route) => byRoute.get(route) ?? { retried() {}, exhausted() {} }
}

/** Counts a route meter's bad reports; every route meter's series starts at 0, so that it shows before the first. */
export function badReportCounter(metrics: ProxyMetrics, routes: readonly ProxyRoute[]): BadReportCounter {
  const counter = metrics.meterBadReports
  for (const route of routes)
    for (const meter of route.meters) counter.inc({ route: route.prefix, meter: meter.name }, 0)
  return (route, meter) => counter.inc({ route, meter })
}

function clientAbortTallies(registers: Registry[]): ClientAbortTallies {
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

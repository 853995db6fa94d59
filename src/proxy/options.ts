// What the proxy's routes and their steps are built from (proxy/plugin.ts, proxy/checks.ts).
import type { IdentityAssertions } from '../identity/assertions.js'
import type { LatencyHistogram, Tally } from '../shared/fast-metrics.js'
import type { TenancyLookups } from '../shared/tenancy-records.js'
import type { AccountExchange, ClientAbortTallies } from './exchange.js'
import type { LimitGate } from './limit-gate.js'
import type { BadReportCounter } from './meter-reports.js'
import type { EjectionCounter } from './metrics.js'
import type { ProxyStep } from './pipeline.js'
import type { ProxyRoute } from './route.js'
import type { RetryCounters } from './upstreams/retry-call.js'
import type { SocketBalancer, UpstreamsReadout } from './upstreams/route-upstreams.js'
import type { WebSocketRuntime } from './websocket/runtime.js'

export interface ProxyOptions {
  routes: readonly ProxyRoute[]
  lookups: TenancyLookups
  /** Time to the upstream's response headers, in seconds. */
  upstreamDuration: LatencyHistogram
  /** Requests admitted from the last second's memory (tenancy/recent-admissions.ts). */
  recentAdmissions: Tally
  clientAborts: ClientAbortTallies
  /** Counts a forwarded request whose answer was cut short (the app's accountRequest). */
  account: AccountExchange
  /** Counts an upstream's report of units that is not a whole number (tgw_meter_bad_reports_total). */
  meterBadReport?: BadReportCounter
  /** Where each route's slots are read at scrape time (tgw_proxy_upstream_slots). */
  upstreamSlots?: Map<string, () => { held: number; waiting: number }>
  /**
   * Each route's targets and their balancer, or its cells', by prefix (proxy/plugin.ts fills it):
   * WebSockets are balanced through it, and the metrics read it at scrape time
   * (tgw_upstream_target_up, tgw_upstream_panic).
   */
  upstreamTargets?: Map<string, UpstreamsReadout & SocketBalancer>
  /** Counts a target's ejection (tgw_upstream_ejections_total). */
  upstreamEjections?: EjectionCounter
  /** A route's retry counters, by prefix (tgw_upstream_retries_total, tgw_upstream_retry_budget_exhausted_total). */
  upstreamRetries?: (route: string) => RetryCounters
  /** Passive health's clock, in ms (default Date.now; a test moves it past a back-off). */
  upstreamClock?: () => number
  limits: LimitGate
  /** Signs the identity of requests on routes with `identity`; null when no route has it. */
  identity: IdentityAssertions | null
  /** The console is served at /console (CONSOLE=on): no route proxies its paths. */
  consoleServed?: boolean
  /** The open WebSockets (proxy/websocket/); null when no route has `websocket: true`. */
  webSockets?: WebSocketRuntime | null
}

/** Makes a route's step, or null when the step has nothing to check on that route (checks.ts). */
export type StepFactory = (route: ProxyRoute, options: ProxyOptions) => ProxyStep | null

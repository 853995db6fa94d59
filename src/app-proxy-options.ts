// What buildApp (app.ts) hands the proxy: its routes and their WebSockets, the lookups, the
// limits' gate, identity assertions and the metrics its steps feed (app-options.ts has the rest).
import type { FastifyInstance } from 'fastify'
import type { AppDeps } from './app-deps.js'
import { identityAssertions } from './identity/assertions.js'
import { limitGate } from './proxy/limit-gate.js'
import { badReportCounter, ejectionCounter, retryCounters } from './proxy/metrics.js'
import type { ProxyOptions } from './proxy/options.js'
import type { ProxyRoute } from './proxy/route.js'
import { WebSocketRuntime } from './proxy/websocket/runtime.js'

/** The open WebSockets, when a route takes them: told of revocations, counted in the metrics. */
function webSocketRuntime(app: FastifyInstance, deps: AppDeps, routes: readonly ProxyRoute[]) {
  if (!routes.some((route) => route.websocket !== null)) return null
  const cache = app.tenancyCache
  const webSockets = new WebSocketRuntime({
    lookups: cache.lookups,
    log: app.log,
    account: app.accountRequest,
    signingKeys: app.keyring,
    maxConnections: deps.config.maxConnections,
  })
  // Revocation reaches open sockets through the bus that clears the caches (proxy/websocket/revocation.ts).
  cache.onEvict(webSockets.evicted)
  app.metrics.proxy.openWebSockets = (route) => webSockets.sockets.openOn(route)
  for (const route of routes) if (route.websocket !== null) app.metrics.proxy.webSocketRoutes.push(route.prefix)
  return webSockets
}

export function proxyOptions(app: FastifyInstance, deps: AppDeps, routes: readonly ProxyRoute[]): ProxyOptions {
  const { metrics, tenancyCache: cache } = app
  return {
    routes,
    webSockets: webSocketRuntime(app, deps, routes),
    lookups: cache.lookups,
    upstreamDuration: metrics.proxy.upstreamDuration,
    recentAdmissions: metrics.proxy.recentAdmissions,
    clientAborts: metrics.proxy.clientAborts,
    account: app.accountRequest,
    meterBadReport: badReportCounter(metrics.proxy, routes),
    upstreamSlots: metrics.proxy.upstreamSlots,
    upstreamTargets: metrics.proxy.upstreamTargets,
    upstreamEjections: ejectionCounter(metrics.proxy, routes),
    upstreamRetries: retryCounters(metrics.proxy, routes),
    upstreamClock: deps.tuning?.upstreamClock,
    limits: limitGate({
      limiter: app.limiter,
      meter: app.usageMeter,
      metrics: metrics.limits,
      rateAlerts: app.alerts.rate,
    }),
    identity: routes.some((route) => route.identity !== null)
      ? identityAssertions({ keyring: app.keyring, issuer: deps.config.issuerUrl, metrics: metrics.credentials, cache })
      : null,
    consoleServed: deps.config.console,
  }
}

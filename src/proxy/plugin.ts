// Every path outside /v1/sub-accounts: authenticate, apply the acting rules and the route's
// scopes, then stream the request to the route's upstream (upstream-target.ts) under the header
// policy of docs/api.md. One encapsulated context per route, so that each has its own connection
// pool, timeout and body limit, and the router picks the longest prefix.
import type {
  FastifyContextConfig,
  FastifyInstance,
  FastifyPluginAsync,
  HTTPMethods,
  onRequestHookHandler,
  RouteHandlerMethod,
} from 'fastify'
import httpProxy from '@fastify/http-proxy'
import { DECISION_STEPS, stepsFor } from './checks.js'
import { answerDecision } from './decision.js'
import { decisionOf } from '../http/decision-mark.js'
import type { ProxyOptions } from './options.js'
import { runSteps } from './pipeline.js'
import { streamBody } from './request-body.js'
import type { ProxyRoute } from './route.js'
import { isSandboxed, UpstreamTarget, upstreamPool } from './upstream-target.js'
import { CellUpstreams } from './upstreams/cell-upstreams.js'
import { heldBodyBytes } from './upstreams/retry-options.js'
import { RouteUpstreams } from './upstreams/route-upstreams.js'
import { PUBLIC_ROUTE_CSP } from './answer-headers.js'

/** The methods a route proxies (@fastify/http-proxy's): any other is the 404 of an unknown route. */
const METHODS: HTTPMethods[] = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS']

/** How a route's scope reads request bodies, and (a public route) the sandbox of its answers. */
function readBodiesAndSandbox(scope: FastifyInstance, route: ProxyRoute): void {
  scope.removeAllContentTypeParsers()
  // A body's grace before its rate counts: the longer of the route's two timeouts (docs/api.md).
  scope.addContentTypeParser(
    '*',
    streamBody(
      route.maxBodyBytes,
      route.bodyIdleTimeoutMs,
      Math.max(route.timeoutMs, route.bodyIdleTimeoutMs),
      heldBodyBytes(route.retries),
    ),
  )
  // A public route's every answer, its refusals included, renders in an opaque origin
  // (answer-headers.ts); the upstream's answer keeps it beside its own policy.
  if (isSandboxed(route))
    scope.addHook('onRequest', (_request, reply, done) => {
      reply.header('content-security-policy', PUBLIC_ROUTE_CSP)
      done()
    })
}

/**
 * A route's targets and their balancer (upstreams/), or its cells and a balancer each; null for a
 * route with one upstream and no cells.
 */
function balancedTargets(route: ProxyRoute, options: ProxyOptions): RouteUpstreams | CellUpstreams | null {
  if (route.targets === null && route.cells === null) return null
  const deps = {
    makePool: (origin: string, connections?: number) => upstreamPool(origin, route, connections),
    clock: options.upstreamClock,
    onEject: (target: string) => options.upstreamEjections?.(route.prefix, target),
  }
  const own = route.targets === null ? null : new RouteUpstreams(route.targets, deps)
  const cells = route.cells
  const upstreams =
    cells === null
      ? own!
      : new CellUpstreams(
          cells,
          // A route with cells always has an upstream (route-table.ts: its cells' when none is given).
          own ?? (cells.ownUpstream ? upstreamPool(new URL(route.upstream!).origin, route) : null),
          route.upstream!,
          deps,
        )
  options.upstreamTargets?.set(route.prefix, upstreams)
  return upstreams
}

/** The route's checks: the proxy's steps, or a decision's (AUTHZ_PORT: proxy/decision.ts). */
function routeChecks(route: ProxyRoute, options: ProxyOptions): onRequestHookHandler {
  const proxied = runSteps(stepsFor(route, options))
  const decided = runSteps(stepsFor(route, options, DECISION_STEPS))
  return function checks(request, reply, done) {
    if (decisionOf(request.raw) === null) proxied.call(this, request, reply, done)
    else decided.call(this, request, reply, done)
  }
}

/** What answers a request every step let through: its upstream, or the decision. */
function routeHandler(target: UpstreamTarget | null): RouteHandlerMethod {
  return (request, reply) => {
    const mark = decisionOf(request.raw)
    if (mark !== null) answerDecision(request, reply, mark)
    // Without an upstream, the decided-only step refused every request that is not a decision.
    else target!.forward(request, reply)
  }
}

async function registerRoute(app: FastifyInstance, route: ProxyRoute, options: ProxyOptions): Promise<void> {
  const readiness = app.readiness
  const limits = options.limits
  const upstreams = balancedTargets(route, options)
  const target =
    route.upstream === null
      ? null
      : new UpstreamTarget(
          route,
          options.upstreamDuration,
          () => readiness.draining,
          options.meterBadReport,
          (request) => limits.charge(request),
          upstreams,
          options.upstreamRetries?.(route.prefix),
        )
  const prefix = route.prefix === '/' ? undefined : route.prefix
  await app.register(
    async (scope) => {
      readBodiesAndSandbox(scope, route)
      // Every check, in order (proxy/checks.ts), in one hook: a request admitted from the last
      // second's memory passes them all without a single promise.
      scope.addHook('onRequest', routeChecks(route, options))
      if (target !== null) scope.addHook('onClose', () => target.pool.destroy())

      // Marks its routes as proxied, for the metrics, the request line, and the usage meter (which
      // counts these whatever their status). Every other route is marked by its own plugin.
      const config: FastifyContextConfig = { kind: 'proxy' }
      const handler = routeHandler(target)
      const webSockets = route.websocket === null ? null : (options.webSockets ?? null)
      if (webSockets === null) {
        for (const url of ['/', '/*']) scope.route({ url, method: METHODS, config, handler })
        return
      }
      // Upgrades go through the router, so the steps above run for them too; the last step opens the
      // upstream's socket, and the connection is the runtime's (proxy/websocket/runtime.ts). Every
      // other request of the route goes as on any route.
      await scope.register(httpProxy, {
        websocket: true,
        wsServerOptions: {
          maxPayload: route.websocket!.maxMessageBytes,
          perMessageDeflate: false,
          autoPong: false,
          handleProtocols: webSockets.handleProtocols,
        },
        upstream: route.upstream!,
        rewritePrefix: target!.upstreamPrefix,
        // Bodies stream through untouched: the parser above hands over the request stream.
        proxyPayloads: false,
        config,
        disableRequestLogging: true,
        handler,
      })
    },
    { prefix },
  )
}

export const proxyRoutes: FastifyPluginAsync<ProxyOptions> = async (app, options) => {
  app.decorateRequest('upstreamSentAt', 0)
  app.decorateRequest('cell', null)
  app.decorateRequest('serviceIdentity', null)
  app.decorateRequest('exchange', null)
  app.decorateRequest('heldBody', null)
  app.decorateRequest('limitSubjects', null)
  app.decorateRequest('limitsCharged', false)
  app.decorateRequest('limitUnits', 1)
  app.decorateRequest('limitsUntaken', null)
  app.decorateRequest('limitsWouldRefuse', null)
  for (const route of options.routes) await registerRoute(app, route, options)
  const webSockets = options.webSockets
  // After the drain period (main.ts), before the server closes: every socket told 1001.
  if (webSockets != null)
    app.addHook('preClose', (done) => {
      webSockets.closeAll()
      done()
    })
}

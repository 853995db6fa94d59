// Which part of the gateway a route belongs to (management, proxy, ops), for the metrics and the
// request line. The management and proxy plugins mark their own routes; every other is ops.
import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'

/** Which part of the gateway answered a request. `none`: no route matched (a 404, a bad path). */
export type RouteKind = 'management' | 'proxy' | 'token' | 'ops' | 'none'
export const ROUTE_KINDS: readonly RouteKind[] = ['management', 'proxy', 'token', 'ops', 'none']

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Which part of the gateway a route belongs to, for the request line and the metrics. */
    kind?: RouteKind
  }
}

/** The kind of the route that answered; `none` when none matched (a 404, a bad path). */
export function routeKindOf(request: FastifyRequest): RouteKind {
  return request.is404 ? 'none' : (request.routeOptions.config.kind ?? 'none')
}

export const routeKinds = fp(
  async (app) => {
    app.addHook('onRoute', (route) => {
      const config = route.config ?? {}
      route.config = { ...config, kind: config.kind ?? 'ops' }
    })
  },
  { name: 'route-kinds' },
)

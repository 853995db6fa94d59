// Prometheus metrics (DESIGN §9), one registry per app so that several gateways in one process
// (tests, benches) keep their own counts. Served on METRICS_PORT by main.ts, never publicly.
import { createServer, type Server } from 'node:http'
import { Counter, Registry, collectDefaultMetrics } from 'prom-client'

export interface Metrics {
  readonly registry: Registry
  /** Lookups the in-process cache could not answer, by the tier that answered them. */
  readonly storeLookups: { readonly redis: Counter.Internal; readonly postgres: Counter.Internal }
  readonly localCacheHits: Counter
  readonly redisErrors: Counter
  readonly proxiedRequests: Counter
}

export function createMetrics(options: { processMetrics?: boolean } = {}): Metrics {
  const registry = new Registry()
  if (options.processMetrics) collectDefaultMetrics({ register: registry })
  const storeLookups = new Counter({
    name: 'tgw_store_lookups_total',
    help: 'Tenancy lookups that missed the in-process cache, by the tier that answered (redis, postgres)',
    labelNames: ['tier'] as const,
    registers: [registry],
  })
  return {
    registry,
    storeLookups: { redis: storeLookups.labels('redis'), postgres: storeLookups.labels('postgres') },
    localCacheHits: new Counter({
      name: 'tgw_cache_local_hits_total',
      help: 'Tenancy lookups answered by the in-process cache',
      registers: [registry],
    }),
    redisErrors: new Counter({
      name: 'tgw_redis_errors_total',
      help: 'Redis commands that failed or timed out (the gateway fell back to Postgres)',
      registers: [registry],
    }),
    proxiedRequests: new Counter({
      name: 'tgw_proxied_requests_total',
      help: 'Requests answered on a proxied route (by the upstream or by the gateway)',
      registers: [registry],
    }),
  }
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

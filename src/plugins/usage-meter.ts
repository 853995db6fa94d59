// The usage meter (docs/api.md, usage) as a plugin: counts requests per tenant and day in memory,
// writes them to Postgres in batches, and writes the last ones when the app closes.
import fp from 'fastify-plugin'
import { routeKindOf } from '../http/route-kind.js'
import type { Sql } from '../store/db.js'
import { UsageMeter } from '../usage/meter.js'

declare module 'fastify' {
  interface FastifyInstance {
    usageMeter: UsageMeter
  }
}

export interface UsageMeterPluginOptions {
  sql: Sql
  /** How often the meter writes to Postgres. */
  flushIntervalMs?: number | undefined
}

export const usageMeterPlugin = fp<UsageMeterPluginOptions>(
  async (app, { sql, flushIntervalMs }) => {
    const metrics = app.metrics
    const meter = new UsageMeter({
      sql,
      log: app.log,
      flushIntervalMs,
      onFlushFailed: () => metrics.usageFlushFailures.inc(),
    })
    meter.start()
    metrics.usageLagMs = () => meter.lagMs()
    app.decorate('usageMeter', meter)

    // Every proxied request, and every refusal once a key authenticated, for the tenant it acted
    // as (the key's own when the refusal came before that was resolved).
    app.addHook('onResponse', (request, reply, done) => {
      const principal = request.principal
      if (principal !== null) {
        meter.keyUsed(principal.key.id)
        if (routeKindOf(request) === 'proxy' || reply.statusCode >= 400)
          meter.record((request.actingTenant ?? principal.tenant).id, reply.statusCode)
      }
      done()
    })

    // In-flight requests are done by now (fastify closed the server first): write the last counts.
    app.addHook('onClose', () => meter.close())
  },
  { name: 'usage-meter', dependencies: ['metrics'] },
)

// The usage meter (docs/api.md, usage) as a plugin: counts requests per tenant and day in memory,
// writes them to Postgres in batches, and writes the last ones when the app closes.
import fp from 'fastify-plugin'
import type { Sql } from '../store/db.js'
import { UsageMeter } from './meter.js'

declare module 'fastify' {
  interface FastifyInstance {
    usageMeter: UsageMeter
  }
}

export interface UsageMeterPluginOptions {
  sql: Sql
  /** How often the meter writes to Postgres. */
  flushIntervalMs?: number | undefined
  /** The usage period, in seconds (USAGE_PERIOD_SECONDS). */
  periodSeconds?: number | undefined
}

export const usageMeterPlugin = fp<UsageMeterPluginOptions>(
  async (app, { sql, flushIntervalMs, periodSeconds }) => {
    const metrics = app.metrics
    const meter = new UsageMeter({
      sql,
      log: app.log,
      flushIntervalMs,
      periodSeconds,
      onFlushFailed: () => metrics.usageFlushFailures.inc(),
    })
    meter.start()
    metrics.usageLagMs = () => meter.lagMs()
    app.decorate('usageMeter', meter)

    // In-flight requests are done by now (fastify closed the server first): write the last counts.
    app.addHook('onClose', () => meter.close())
  },
  { name: 'usage-meter', dependencies: ['metrics'] },
)

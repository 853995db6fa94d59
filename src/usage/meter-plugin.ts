// The usage meter (docs/api.md, usage) as a plugin: counts requests per tenant and day in memory,
// writes them to Postgres in batches, and writes the last ones when the app closes; closes the
// usage periods behind the replicas' flushes (usage/period-close.ts).
import fp from 'fastify-plugin'
import { type Sql, withDeadline } from '../store/db.js'
import { DEFAULT_PERIOD_SECONDS, UsageMeter } from './meter.js'
import { CLOSE_TIMEOUT_MS } from './meter-writes.js'
import { UsageExporter, type UsageExporterOptions } from './exporter.js'
import { checkPeriodLength, DEFAULT_CLOSE_GRACE_SECONDS, PeriodCloser } from './period-close.js'

declare module 'fastify' {
  interface FastifyInstance {
    usageMeter: UsageMeter
    usagePeriods: PeriodCloser
    /** The push of closed periods; null without USAGE_EXPORT_URL. */
    usageExporter: UsageExporter | null
  }
}

export interface UsageMeterPluginOptions {
  sql: Sql
  /** A client of one connection of the meter's own, for its writes (store/db.ts, openOwnConnection). */
  openConnection?: ((parameters: Record<string, string>) => Sql) | undefined
  /** How often the meter writes to Postgres. */
  flushIntervalMs?: number | undefined
  /** The usage period, in seconds (USAGE_PERIOD_SECONDS). */
  periodSeconds?: number | undefined
  /** How long after its end a period waits for late flushes (USAGE_CLOSE_GRACE_SECONDS). */
  closeGraceSeconds?: number | undefined
  /** How often periods are closed (default 5 s). */
  closeIntervalMs?: number | undefined
  /** How long a replica that stopped flushing is waited for (tests). */
  liveReplicaSeconds?: number | undefined
  /** The meter's clock, which dates counts and flush marks (tests move it). */
  clock?: (() => number) | undefined
  /** The push of closed periods (USAGE_EXPORT_URL); null: none. */
  push: Omit<UsageExporterOptions, 'sql' | 'log' | 'periodSeconds' | 'onLag'> | null
}

export const usageMeterPlugin = fp<UsageMeterPluginOptions>(
  async (
    app,
    {
      sql,
      openConnection,
      flushIntervalMs,
      periodSeconds = DEFAULT_PERIOD_SECONDS,
      closeGraceSeconds,
      closeIntervalMs,
      liveReplicaSeconds,
      clock,
      push,
    },
  ) => {
    // A store that is away at the start does not stop it; the close itself uses no other length.
    await checkPeriodLength(sql, periodSeconds, (err) =>
      app.log.warn({ err }, 'the usage periods closed so far could not be read; each close checks their length'),
    )
    const metrics = app.metrics
    const meter = new UsageMeter({
      sql,
      openConnection,
      log: app.log,
      flushIntervalMs,
      periodSeconds,
      ...(clock === undefined ? {} : { now: clock }),
      onFlushFailed: () => metrics.usageFlushFailures.inc(),
      onRowRefused: () => metrics.usageFlushRowsRefused.inc(),
    })
    const closer = new PeriodCloser({
      sql,
      log: app.log,
      periodSeconds,
      graceSeconds: closeGraceSeconds ?? DEFAULT_CLOSE_GRACE_SECONDS,
      intervalMs: closeIntervalMs,
      liveReplicaSeconds,
    })
    const exporter =
      push === null
        ? null
        : new UsageExporter({ ...push, sql, log: app.log, periodSeconds, onLag: (s) => metrics.usageExportLag.set(s) })
    meter.start()
    closer.start()
    exporter?.start()
    metrics.usageLagMs = () => meter.lagMs()
    app.decorate('usageMeter', meter)
    app.decorate('usagePeriods', closer)
    app.decorate('usageExporter', exporter)

    // In-flight requests are done by now (fastify closed the server first): write the last counts,
    // within the meter's own bound. A close or an export stuck on Postgres holds up neither that
    // nor the stop: they run beside it and are waited for only until the same bound ends.
    app.addHook('onClose', async () => {
      const stopBy = performance.now() + CLOSE_TIMEOUT_MS
      const others = Promise.all([exporter?.stop(), closer.stop()])
      await meter.close()
      await withDeadline(others, Math.max(0, Math.floor(stopBy - performance.now()))).catch(() => {
        app.log.warn('usage: a period close or an export was still under way at the stop; left to end with the process')
      })
    })
  },
  { name: 'usage-meter', dependencies: ['metrics'] },
)

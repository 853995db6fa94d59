// The request log as a plugin (docs/operations.md, the request log): its table made, a writer
// fed by the request accounting (ops/request-accounting.ts), the days past the retention dropped
// every hour, an old log converted and an index built once serving, and the last records written
// when the app closes. Off when the retention is 0.
import fp from 'fastify-plugin'
import type { Sql } from '../store/db.js'
import { buildAccountIdsIndex } from './account-ids-index.js'
import { convertOldLog } from './conversion.js'
import { requestLogMetrics } from './metrics.js'
import { dayOf, dropExpiredPartitions } from './partitions.js'
import { ensureRequestLogTable } from './schema.js'
import { RequestLogWriter, type WriterOptions } from './writer.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The request log's writer; null when the log is off (REQUEST_LOG_RETENTION_DAYS=0). */
    requestLog: RequestLogWriter | null
    /** Where the request log is kept (the store's own Postgres unless REQUEST_LOG_DATABASE_URL). */
    requestLogSql: Sql
  }
}

export interface RequestLogPluginOptions
  extends Partial<
    Pick<
      WriterOptions,
      'bufferRecords' | 'batchRecords' | 'flushIntervalMs' | 'rowRecords' | 'openCopyConnection' | 'copyTimeoutMs'
    >
  > {
  sql: Sql
  retentionDays: number
  /** Between retention sweeps (default an hour); the first runs at start. */
  sweepIntervalMs?: number
  clock?: () => number
}

export const requestLogPlugin = fp<RequestLogPluginOptions>(
  async (app, { sql, retentionDays, sweepIntervalMs = 3_600_000, clock = Date.now, ...writerOptions }) => {
    app.decorate('requestLogSql', sql)
    if (retentionDays === 0) {
      app.decorate('requestLog', null)
      return
    }
    let tableReady = false
    try {
      await ensureRequestLogTable(sql)
      tableReady = true
    } catch (err) {
      // A request log of its own Postgres that is down: the gateway starts, and the writer makes
      // the table before its first write.
      app.log.warn({ err }, 'request log: its table could not be made; the writer tries again')
    }
    const metrics = requestLogMetrics(app.metrics.registry, () => writer)
    const writer = new RequestLogWriter({
      sql,
      log: app.log,
      ...writerOptions,
      onWritten: metrics.written,
      onWriteFailed: metrics.writeFailed,
    })
    writer.tableReady = tableReady
    writer.start()
    app.decorate('requestLog', writer)

    // The upkeep: the days past the retention dropped, at start and hourly; once serving, the
    // index of client ids keyed by account built where the log had partitions before it
    // (account-ids-index.ts), on connections of its own that the close ends. One step at a time,
    // in order, so that a day's detach never waits for a build, nor a build for another.
    let closed = false
    let indexWhole = false
    const indexConnections = new Set<Sql>()
    const openOwnConnection = writerOptions.openCopyConnection
    const openIndexConnection =
      openOwnConnection &&
      ((parameters: Record<string, string>) => {
        if (closed) throw new Error('request log: the app closed')
        const connection = openOwnConnection(parameters)
        indexConnections.add(connection)
        return connection
      })
    const sweep = async () => {
      if (closed) return
      try {
        writer.forgetDays(await dropExpiredPartitions(sql, retentionDays, clock()))
      } catch (err) {
        app.log.warn({ err }, 'request log: the retention sweep failed; it runs again within the hour')
      }
    }
    const buildIndex = async () => {
      if (indexWhole || closed) return
      try {
        indexWhole = await buildAccountIdsIndex(sql, openIndexConnection, dayOf(clock()) - retentionDays)
      } catch (err) {
        if (!closed)
          app.log.warn({ err }, 'request log: building the index of client ids stopped; it goes on within the hour')
      } finally {
        indexConnections.clear() // the build ends each it opened
      }
    }
    let upkeep = Promise.resolve()
    let steps = 0
    const inTurn = (step: () => Promise<void>) => {
      steps++
      upkeep = upkeep.then(step).finally(() => steps--)
    }
    inTurn(sweep)
    // A log of a row a record, from before the rows, moves in the background once serving.
    app.addHook('onReady', async () => {
      void convertOldLog(sql, app.log).catch((err) => {
        app.log.warn({ err }, 'request log: converting the old log stopped; it goes on at the next start')
      })
      inTurn(buildIndex)
    })
    const timer = setInterval(() => {
      if (steps > 0) return // the last hour's upkeep is still under way
      inTurn(sweep)
      inTurn(buildIndex)
    }, sweepIntervalMs)
    timer.unref()
    app.addHook('onClose', async () => {
      closed = true
      clearInterval(timer)
      await Promise.all([writer.close(), ...[...indexConnections].map((connection) => connection.end({ timeout: 0 }))])
    })
  },
  { name: 'request-log', dependencies: ['metrics'] },
)

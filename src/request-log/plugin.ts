// The request log as a plugin (docs/operations.md, the request log): its table made, a writer
// fed by the request accounting (ops/request-accounting.ts), the days past the retention dropped
// every hour, an old log converted once serving, and the last records written when the app
// closes. Off when the retention is 0.
import fp from 'fastify-plugin'
import type { Sql } from '../store/db.js'
import { convertOldLog } from './conversion.js'
import { requestLogMetrics } from './metrics.js'
import { dropExpiredPartitions } from './partitions.js'
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

    const sweep = async () => {
      try {
        writer.forgetDays(await dropExpiredPartitions(sql, retentionDays, clock()))
      } catch (err) {
        app.log.warn({ err }, 'request log: the retention sweep failed; it runs again within the hour')
      }
    }
    void sweep()
    // A log of a row a record, from before the rows, moves in the background once serving.
    app.addHook('onReady', async () => {
      void convertOldLog(sql, app.log).catch((err) => {
        app.log.warn({ err }, 'request log: converting the old log stopped; it goes on at the next start')
      })
    })
    const timer = setInterval(() => void sweep(), sweepIntervalMs)
    timer.unref()
    app.addHook('onClose', async () => {
      clearInterval(timer)
      await writer.close()
    })
  },
  { name: 'request-log', dependencies: ['metrics'] },
)

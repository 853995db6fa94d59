// The request log as a plugin (docs/operations.md, the request log): its table made, a writer
// fed by the request accounting (ops/request-accounting.ts), the days past the retention dropped
// every hour, an old log converted and an index built once serving, and the last records written
// when the app closes. Off when the retention is 0.
import fp from 'fastify-plugin'
import type { Sql } from '../store/db.js'
import { buildAccountIdsIndex } from './account-ids-index.js'
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

    // The index of client ids keyed by account, built in the background where the log had
    // partitions before it (account-ids-index.ts), on a connection that the close ends.
    let accountIdsIndexed = false
    let indexConnection: Sql | null = null
    const openCopyConnection = writerOptions.openCopyConnection
    const openIndexConnection =
      openCopyConnection && ((parameters: Record<string, string>) => (indexConnection = openCopyConnection(parameters)))
    const buildIndex = async () => {
      if (accountIdsIndexed) return
      try {
        accountIdsIndexed = await buildAccountIdsIndex(sql, openIndexConnection)
      } catch (err) {
        app.log.warn({ err }, 'request log: building the index of client ids stopped; it goes on within the hour')
      }
    }
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
      void buildIndex()
    })
    const timer = setInterval(() => void sweep().then(buildIndex), sweepIntervalMs)
    timer.unref()
    app.addHook('onClose', async () => {
      clearInterval(timer)
      await Promise.all([writer.close(), (indexConnection as Sql | null)?.end({ timeout: 0 })])
    })
  },
  { name: 'request-log', dependencies: ['metrics'] },
)

// `cli -- usage export [--from <RFC 3339>] [--to <RFC 3339>] [--account <uuid>] [--format ndjson|csv]`
// (docs/billing.md): the usage export's records of every parent account, or of one, as the export
// route streams them for a parent. The records go to stdout as they are read, not one JSON object;
// where the closed periods end goes to stderr.
// `cli -- usage reconcile [--from] [--to] [--account]`: reconciliation of every account, or of one,
// an entry a line (JSON), as the reconciliation route answers a parent.
import type { Config } from '../config.js'
import { ApiError } from '../errors.js'
import type { Sql } from '../store/db.js'
import { openStore } from '../store/db.js'
import { migrate } from '../store/migrate.js'
import { closedUntil, exportRows, replicaLost } from '../store/usage-periods.js'
import { reconciliationCounts } from '../store/usage-reconciliation.js'
import { logUnitSums } from '../request-log/unit-sums.js'
import { exportTarget } from '../usage/exporter.js'
import { checkPeriodLength } from '../usage/period-close.js'
import { reconcile } from '../usage/reconciliation.js'
import { type ExportFormat, exportEnd, exportInstant, exportRange, exportText } from '../usage/export.js'
import { type CliIo, type Options, parentAccount, UsageError, uuid, WROTE_OUTPUT } from './options.js'

export async function exportUsage(sql: Sql, options: Options, config: Config, io: CliIo): Promise<unknown> {
  const format = options.format ?? 'ndjson'
  if (format !== 'ndjson' && format !== 'csv') throw new UsageError('--format must be ndjson or csv')
  const range = rangeOf(options, config.usagePeriodSeconds)
  await migrate(sql)
  // The records' period_end follows the length: the CLI's must be the gateway's.
  await checkPeriodLength(sql, config.usagePeriodSeconds)
  const accountId = options.account === undefined ? null : (await parentAccount(sql, uuid(options, 'account'))).id
  const closed = await closedUntil(sql)
  const to = exportEnd(range, closed)
  const pages = to === null ? [] : exportRows(sql, { from: range.from, to, accountId })
  for await (const text of exportText(pages, {
    format: format satisfies ExportFormat,
    periodSeconds: config.usagePeriodSeconds,
    source: config.issuerUrl,
  }))
    io.stdout(text)
  if (config.issuerUrlIsDefault)
    io.stderr(
      `warning: ISSUER_URL is not set, so the records' source is ${config.issuerUrl}: set it as the gateway has it, or a receiver that dedupes by id and source counts these records apart from the gateway's\n`,
    )
  io.stderr(
    closed === null
      ? 'no usage period has closed yet: nothing is exported\n'
      : `closed until ${exportInstant(closed)}: later periods are not exported yet\n`,
  )
  return WROTE_OUTPUT
}

export async function reconcileUsage(sql: Sql, options: Options, config: Config, io: CliIo): Promise<unknown> {
  const range = rangeOf(options, config.usagePeriodSeconds)
  await migrate(sql)
  await checkPeriodLength(sql, config.usagePeriodSeconds)
  const accountId = options.account === undefined ? null : (await parentAccount(sql, uuid(options, 'account'))).id
  const closed = await closedUntil(sql)
  const pushTarget = config.usageExport === null ? null : exportTarget(config.usageExport.url)
  // The request log where the gateway keeps it; none when it is off.
  const logSql =
    config.requestLogRetentionDays === 0
      ? null
      : config.requestLogDatabaseUrl === undefined
        ? sql
        : (
            await openStore({
              databaseUrl: config.requestLogDatabaseUrl,
              dataDir: config.dataDir,
              holder: 'the cli',
              maxConnections: 1,
            })
          ).sql
  try {
    const [counts, log, lost] = await Promise.all([
      reconciliationCounts(sql, { ...range, accountId, closedUntil: closed, pushTarget }),
      logSql === null
        ? null
        : logUnitSums(
            logSql,
            { ...range, accountId, closedUntil: closed },
            { days: config.requestLogRetentionDays, nowMs: Date.now() },
          ),
      replicaLost(sql, { ...range, closedUntil: closed }),
    ])
    for (const entry of reconcile(counts, log, lost)) io.stdout(`${JSON.stringify(entry)}\n`)
  } finally {
    if (logSql !== null && logSql !== sql) await logSql.end({ timeout: 5 })
  }
  io.stderr(
    `from ${exportInstant(range.from)} to ${exportInstant(range.to)}; ${
      closed === null ? 'no usage period has closed yet' : `closed until ${exportInstant(closed)}`
    }\n`,
  )
  return WROTE_OUTPUT
}

/** --from and --to as the route reads them, refused in the words of the flags. */
function rangeOf(options: Options, periodSeconds: number) {
  const text = (flag: string) => (typeof options[flag] === 'string' ? (options[flag] as string) : undefined)
  try {
    return exportRange({ from: text('from'), to: text('to') }, periodSeconds, Date.now())
  } catch (err) {
    if (!(err instanceof ApiError)) throw err
    const fields = (err.options.errors ?? []).map((e) => `--${e.path.split('/').pop()} ${e.message}`)
    throw new UsageError(fields.join('; '))
  }
}

export const USAGE_COMMANDS = { 'usage export': exportUsage, 'usage reconcile': reconcileUsage }

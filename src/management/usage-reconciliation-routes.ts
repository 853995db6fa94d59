// Usage reconciliation (docs/billing.md): the parent's sub-accounts and meters of a range, the
// meter beside the limiter, the request log and the export, every difference explained.
import { closedUntil, replicaLost } from '../store/usage-periods.js'
import { reconciliationCounts, TooManyRows } from '../store/usage-reconciliation.js'
import { validationFailed } from '../errors.js'
import { logUnitSums } from '../request-log/unit-sums.js'
import { exportInstant, exportRange } from '../usage/export.js'
import { reconcile, reconcileCredits } from '../usage/reconciliation.js'
import { creditLedgers } from '../store/credit-grants.js'
import { UsageReconciliation, UsageReconciliationQuery } from '../schemas/usage-reconciliation.js'
import { CLOSED_UNTIL_HEADER } from './usage-export-routes.js'
import { type ManagementContext, managementOperation, parentOf } from './common.js'
import { parentPlaces } from './log-reads.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation } from './operation-shapes.js'

/**
 * The most sub-account meters one reconciliation answers (docs/api.md): each is a line of the
 * answer from three counts, and 10^5 of them ran a replica out of its heap. Past it: 400.
 */
export const RECONCILIATION_MAX_ROWS = 20_000

const tooManyRows = (most: number) =>
  validationFailed([
    {
      path: '/querystring/from',
      message: `the range holds more than ${most} sub-account meters, the most one reconciliation answers: shorten it`,
    },
  ])

export const USAGE_RECONCILIATION_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/usage/reconciliation',
    ...accountOperation(
      'sub_accounts:read',
      'reconcileUsage',
      { querystring: UsageReconciliationQuery, response: { 200: UsageReconciliation } },
      { heavyRead: 'gated' },
    ),
    async handler(request, reply, { reads: sql, usageExport, requestLog }) {
      const range = exportRange(request.query, usageExport.periodSeconds, Date.now())
      const accountId = parentOf(request).id
      const closed = await closedUntil(sql)
      // The log's read counts among the parent's reads of its log at once, bounded as they are.
      const maxRows = usageExport.reconciliationMaxRows
      const [counts, log, lost, ledgers] = await Promise.all([
        reconciliationCounts(sql, {
          ...range,
          accountId,
          closedUntil: closed,
          pushTarget: usageExport.pushTarget,
          maxRows,
        }).catch((err: unknown) => {
          throw err instanceof TooManyRows ? tooManyRows(maxRows) : err
        }),
        requestLog === null
          ? null
          : requestLog.reads.run(parentPlaces(accountId), () =>
              logUnitSums(
                requestLog.sql,
                { ...range, accountId, closedUntil: closed },
                {
                  days: requestLog.retentionDays,
                  nowMs: Date.now(),
                  statementTimeoutMs: requestLog.statementTimeoutMs,
                  maxRows,
                },
              ),
            ),
        replicaLost(sql, { ...range, closedUntil: closed }),
        creditLedgers(sql, accountId),
      ])
      if (log !== null && log.length > maxRows) throw tooManyRows(maxRows)
      if (closed !== null) reply.header(CLOSED_UNTIL_HEADER, exportInstant(closed))
      return {
        from: exportInstant(range.from),
        to: exportInstant(range.to),
        data: reconcile(counts, log, lost),
        credits: reconcileCredits(ledgers),
      }
    },
  }),
]

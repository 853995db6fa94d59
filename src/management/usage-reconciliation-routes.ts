// Usage reconciliation (docs/billing.md): the parent's sub-accounts and meters of a range, the
// meter beside the limiter, the request log and the export, every difference explained.
import { closedUntil, replicaLost } from '../store/usage-periods.js'
import { reconciliationCounts } from '../store/usage-reconciliation.js'
import { logUnitSums } from '../request-log/unit-sums.js'
import { exportInstant, exportRange } from '../usage/export.js'
import { reconcile } from '../usage/reconciliation.js'
import { UsageReconciliation, UsageReconciliationQuery } from '../schemas/usage-reconciliation.js'
import { CLOSED_UNTIL_HEADER } from './usage-export-routes.js'
import { type ManagementContext, managementOperation, operation, parentOf } from './common.js'
import { parentPlaces } from './log-reads.js'
import type { OperationTable } from './operation-table.js'

export const USAGE_RECONCILIATION_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/usage/reconciliation',
    schema: {
      ...operation('reconcileUsage'),
      querystring: UsageReconciliationQuery,
      response: { 200: UsageReconciliation },
    },
    config: { scope: 'sub_accounts:read' },
    async handler(request, reply, { sql, usageExport, requestLog }) {
      const range = exportRange(request.query, usageExport.periodSeconds, Date.now())
      const accountId = parentOf(request).id
      const closed = await closedUntil(sql)
      // The log's read counts among the parent's reads of its log at once, bounded as they are.
      const [counts, log, lost] = await Promise.all([
        reconciliationCounts(sql, { ...range, accountId, closedUntil: closed, pushTarget: usageExport.pushTarget }),
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
                },
              ),
            ),
        replicaLost(sql, { ...range, closedUntil: closed }),
      ])
      if (closed !== null) reply.header(CLOSED_UNTIL_HEADER, exportInstant(closed))
      return { from: exportInstant(range.from), to: exportInstant(range.to), data: reconcile(counts, log, lost) }
    },
  }),
]

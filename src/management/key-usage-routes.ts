// A sub-account's usage by key (docs/api.md, Usage by key): which of the keys that acted as it
// made its requests, its own and its parent's. Beside the usage report, which is by sub-account.
import { keyUnitRows, keyUsageRows } from '../store/usage-reads.js'
import { keyUsageEntries, reportRange } from '../usage/report.js'
import { type ManagementContext, managementOperation, ownSubAccount, parentOf } from './common.js'
import type { OperationTable } from './operation-table.js'
import { subAccountOperation } from './operation-shapes.js'
import { PAGE_LIMIT_DEFAULT } from '../schemas/common.js'
import { KeyUsageQuery, KeyUsageReport } from '../schemas/usage.js'

export const KEY_USAGE_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/:sub_id/usage',
    ...subAccountOperation(
      'sub_accounts:read',
      'getSubAccountKeyUsage',
      { querystring: KeyUsageQuery, response: { 200: KeyUsageReport } },
      { heavyRead: 'gated' },
    ),
    async handler(request, _reply, { reads: sql, cursors }) {
      const { limit = PAGE_LIMIT_DEFAULT, cursor } = request.query
      // Unknown or another parent's: 404 before anything else is said about the query.
      const sub = await ownSubAccount(sql, request, request.params.sub_id)
      // Bound to the sub-account, not the range: like the report's, a cursor names a key to go on after.
      const scope = { list: 'key-usage', owner: `${parentOf(request).id}/${sub.id}` } as const
      const afterSeq = await cursors.decode(cursor, scope)
      const { from, to } = reportRange(request.query, Date.now())
      const rows = await keyUsageRows(sql, sub.id, { from, to, afterSeq, limit: limit + 1 })
      const units = await keyUnitRows(sql, sub.id, [...new Set(rows.map((row) => row.key_id))], { from, to })
      const page = await cursors.page(
        keyUsageEntries(rows, sub.id, units),
        limit,
        ({ seq: _seq, ...entry }) => entry,
        scope,
      )
      return { from, to, sub_account_id: sub.id, ...page }
    },
  }),
]

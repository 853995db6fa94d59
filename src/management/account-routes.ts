// What a parent asks about its whole account: the usage report, its account limits with this
// month's use, and the scopes the operator lets it grant (docs/api.md, Usage report; Limits and
// quotas; Key policies).
import { monthOf } from '../limits/month.js'
import { monthUse, readLimits } from '../limits/store.js'
import { scopeCeiling } from '../store/tenants.js'
import { shownLimits } from '../shared/tenant-limits.js'
import { readUsage, reportRange } from '../usage/report.js'
import { type ManagementContext, managementOperation, parentOf } from './common.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation } from './operation-shapes.js'
import { AccountLimits, AccountScopes } from '../schemas/accounts.js'
import { NoQuery, PAGE_LIMIT_DEFAULT } from '../schemas/common.js'
import { UsageQuery, UsageReport } from '../schemas/usage.js'

/** The account's reads, in the order they are registered: before /:sub_id, though the router prefers these static segments anyway. */
export const ACCOUNT_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/usage',
    ...accountOperation(
      'sub_accounts:read',
      'getUsage',
      { querystring: UsageQuery, response: { 200: UsageReport } },
      { heavyRead: 'gated' },
    ),
    async handler(request, _reply, { reads: sql, cursors }) {
      const { limit = PAGE_LIMIT_DEFAULT, cursor, sub_account_id, granularity, include } = request.query
      const scope = { list: 'usage', owner: parentOf(request).id } as const
      const afterSeq = await cursors.decode(cursor, scope)
      const { from, to } = reportRange(request.query, Date.now())
      const range = { from, to, afterSeq, limit: limit + 1, subAccountId: sub_account_id?.toLowerCase() ?? null }
      const entries = await readUsage(sql, parentOf(request).id, range, granularity ?? 'range', include === 'name')
      return { from, to, ...(await cursors.page(entries, limit, ({ seq: _seq, ...entry }) => entry, scope)) }
    },
  }),

  managementOperation({
    method: 'GET',
    url: '/limits',
    ...accountOperation('sub_accounts:read', 'getAccountLimits', {
      querystring: NoQuery,
      response: { 200: AccountLimits },
    }),
    async handler(request, _reply, { sql }) {
      const parentId = parentOf(request).id
      const month = monthOf(Date.now())
      // Two reads, not one snapshot: the use is a count that moves anyway (the meter flushes each second).
      const [limits, used] = await Promise.all([
        readLimits(sql, parentId),
        monthUse(sql, { tenantId: parentId, level: 'account' }, month),
      ])
      return { account: shownLimits(limits), month, used }
    },
  }),

  // A read of its own, not a field of /limits: that answer's shape is kept as it is
  // (docs/decisions/0185-the-scope-ceiling-read-on-its-own-get-v1-sub.md).
  managementOperation({
    method: 'GET',
    url: '/scopes',
    ...accountOperation('sub_accounts:read', 'getAccountScopes', {
      querystring: NoQuery,
      response: { 200: AccountScopes },
    }),
    handler: async (request, _reply, { sql }) => ({ allowed_scopes: await scopeCeiling(sql, parentOf(request).id) }),
  }),
]

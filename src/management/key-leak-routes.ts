// A parent's own report of a leaked key (docs/secret-scanning.md): a key of the account (its own or
// a sub-account's) found somewhere it should not be gets the account's leak_policy at once (its
// settings, settings-routes.ts), as a report from GitHub's secret scanning would.
import { digest } from '../auth/key-format.js'
import { reportLeaks } from '../auth/key-leaks.js'
import { presentKey } from '../schemas/present.js'
import { LeakedKey, ReportLeakBody } from '../schemas/key-leaks.js'
import { accountKeyByDigest } from '../store/key-leaks.js'
import { type ManagementContext, managementOperation, notFound, originOf, parentOf } from './common.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation } from './operation-shapes.js'

export const KEY_LEAK_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: '/api-keys/leaks',
    ...accountOperation('sub_accounts:write', 'reportLeakedKey', {
      body: ReportLeakBody,
      response: { 200: LeakedKey },
    }),
    async handler(request, _reply, { sql, cache }) {
      const accountId = parentOf(request).id
      const keyDigest = digest(request.body.key)
      // Another account's key, or none: one answer, so that keys cannot be probed.
      if ((await accountKeyByDigest(sql, accountId, keyDigest)) === null) throw notFound('key of this account')
      await reportLeaks({ sql, cache, origin: originOf(request), source: 'parent', accountId }, [
        { token: request.body.key, url: null },
      ])
      const row = (await accountKeyByDigest(sql, accountId, keyDigest))!
      return { ...presentKey(row), sub_account_id: row.tenant_id === accountId ? null : row.tenant_id }
    },
  }),
]

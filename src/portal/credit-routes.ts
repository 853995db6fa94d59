// A customer's prepaid credits in the portal (docs/portal.md): its balance of each meter and its
// grants, read-only, for the session's own sub-account only, behind `usage:read`. The grants'
// `metadata` is the parent's own record (an invoice id, a note) and stays out, as the parent's
// shadow limits do (docs/decisions/0382-the-portal-shows-credits-under-usage-read.md).
import { Type } from 'typebox'
import { ApiError } from '../errors.js'
import { creditBalances, creditMetersInForce } from '../management/credit-changes.js'
import { defineOperation, type OperationTable } from '../management/operation-table.js'
import { CreditBalances, CreditGrant } from '../schemas/credits.js'
import { presentCreditGrant } from '../schemas/present.js'
import { listCreditGrants, readCreditDebts } from '../store/credit-grants.js'
import type { Sql } from '../store/db.js'
import { getTenant } from '../store/tenants.js'
import { sessionOf } from './session-auth.js'

const { metadata: _metadata, ...grantFields } = CreditGrant.properties
const PortalCreditGrant = Type.Object(grantFields, { additionalProperties: false })
const PortalCredits = Type.Object(
  {
    balances: CreditBalances.properties.balances,
    grants: Type.Array(PortalCreditGrant, {
      description: 'live grants first, in the order use burns them; then voided and expired ones, newest first',
    }),
  },
  { additionalProperties: false },
)

const portalOperation = defineOperation<{ sql: Sql }>()

export const PORTAL_CREDIT_OPERATIONS: OperationTable<{ sql: Sql }> = [
  portalOperation({
    method: 'GET',
    url: '/credits',
    schema: { hide: true, response: { 200: PortalCredits } },
    config: { permission: 'usage:read' },
    async handler(request, _reply, { sql }) {
      const session = sessionOf(request)
      const sub = await getTenant(sql, session.sub_account_id)
      if (sub === null) throw new ApiError('unauthenticated', 'the portal session has ended')
      // Scoped by the session's parent and sub-account both, never by anything the request says.
      const [rows, debts, meters] = await Promise.all([
        listCreditGrants(sql, session.account_id, session.sub_account_id),
        readCreditDebts(sql, session.sub_account_id),
        creditMetersInForce(sql, sub),
      ])
      return {
        balances: creditBalances(rows, meters, debts),
        grants: rows.map((row) => {
          const { metadata: _, ...grant } = presentCreditGrant(row)
          return grant
        }),
      }
    },
  }),
]

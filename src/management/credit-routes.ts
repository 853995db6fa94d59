// A sub-account's prepaid credits: grant, list with the balances, void (docs/api.md, Credits).
// The changes and their events are in credit-changes.ts.
import { validationFailed } from '../errors.js'
import { MANAGEMENT_PREFIX } from '../shared/paths.js'
import { listCreditGrants, readCreditDebts } from '../store/credit-grants.js'
import { burnBuckets, grantHistory } from '../store/credit-history.js'
import { reportRange } from '../usage/report.js'
import { subAccountEntries } from '../cache/index.js'
import {
  CreateCreditGrantBody,
  CreditBalances,
  CreditGrant,
  CreditGrantParams,
  CreditHistory,
  CreditHistoryQuery,
  DEFAULT_GRANT_PRIORITY,
} from '../schemas/credits.js'
import {
  type ManagementContext,
  managementOperation,
  notFound,
  originOf,
  ownSubAccount,
  parentOf,
  pathUuid,
} from './common.js'
import { creditBalances, creditMetersInForce, grantCreditsWithEvent, voidCreditsWithEvent } from './credit-changes.js'
import { burnBucketSeconds, creditHistory } from './credit-history.js'
import { presentCreditGrant } from '../schemas/present.js'
import type { OperationTable } from './operation-table.js'
import { subAccountOperation } from './operation-shapes.js'

/** Checks a body's `meter` and `expires_at` beyond its schema; the expiry as a Date, or null. */
function checkedGrant(body: { meter: string; expires_at?: string | null | undefined }, now: number): Date | null {
  if (body.meter === 'requests')
    throw validationFailed([
      { path: '/body/meter', message: "is `requests`, the cost's own meter: credits are of a route's meters" },
    ])
  if (body.expires_at == null) return null
  const expiresAt = new Date(body.expires_at)
  if (!(expiresAt.getTime() > now))
    throw validationFailed([{ path: '/body/expires_at', message: 'must be in the future' }])
  return expiresAt
}

const DAY_MS = 86_400_000

/** A sub-account's credits, in the order they are registered. */
export const CREDIT_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: '/:sub_id/credits/grants',
    ...subAccountOperation('sub_accounts:write', 'createCreditGrant', {
      body: CreateCreditGrantBody,
      response: { 201: CreditGrant },
    }),
    async handler(request, reply, { sql, cache }) {
      const { body } = request
      const expiresAt = checkedGrant(body, Date.now())
      const sub = await ownSubAccount(sql, request, request.params.sub_id)
      const row = await grantCreditsWithEvent(sql, originOf(request), {
        subAccountId: sub.id,
        accountId: parentOf(request).id,
        meter: body.meter,
        units: body.units,
        priority: body.priority ?? DEFAULT_GRANT_PRIORITY,
        expiresAt,
        metadata: body.metadata ?? {},
      })
      // Every replica reads the sub-account's grants again within a second (its limits' schedule).
      await cache.invalidate(subAccountEntries(parentOf(request).id, sub.id))
      return reply
        .code(201)
        .header('location', `${MANAGEMENT_PREFIX}/${sub.id}/credits/grants/${row.id}`)
        .send(presentCreditGrant(row))
    },
  }),

  managementOperation({
    method: 'GET',
    url: '/:sub_id/credits',
    ...subAccountOperation('sub_accounts:read', 'getCredits', { response: { 200: CreditBalances } }),
    async handler(request, _reply, { sql }) {
      const sub = await ownSubAccount(sql, request, request.params.sub_id)
      const [rows, debts, meters] = await Promise.all([
        listCreditGrants(sql, parentOf(request).id, sub.id),
        readCreditDebts(sql, sub.id),
        creditMetersInForce(sql, sub),
      ])
      return {
        balances: creditBalances(rows, meters, debts),
        grants: rows.map(presentCreditGrant),
      }
    },
  }),

  // What its grants held over time, for the console's burn-down: read-only, from the grants and
  // the burn log (docs/decisions/0381-the-credits-history-is-read-from-the-burn-log.md).
  managementOperation({
    method: 'GET',
    url: '/:sub_id/credits/history',
    ...subAccountOperation('sub_accounts:read', 'getCreditHistory', {
      querystring: CreditHistoryQuery,
      response: { 200: CreditHistory },
    }),
    async handler(request, _reply, { sql, usageExport }) {
      // Unknown or another parent's: 404 before anything is said about the range.
      const sub = await ownSubAccount(sql, request, request.params.sub_id)
      const nowMs = Date.now()
      const { from, to } = reportRange(request.query, nowMs)
      const fromMs = Date.parse(from)
      const untilMs = Date.parse(to) + DAY_MS
      const bucketSeconds = burnBucketSeconds(usageExport.periodSeconds, fromMs, untilMs)
      const [grants, burns, debts, creditMeters] = await Promise.all([
        grantHistory(sql, parentOf(request).id, sub.id),
        burnBuckets(sql, sub.id, { from: new Date(fromMs), until: new Date(untilMs), bucketSeconds }),
        readCreditDebts(sql, sub.id),
        creditMetersInForce(sql, sub),
      ])
      const endMs = Math.max(fromMs, Math.min(untilMs, nowMs))
      const meters = creditHistory(grants, burns, creditMeters, debts, {
        fromMs,
        endMs,
        nowMs,
        bucketSeconds,
      })
      return { from, to, meters }
    },
  }),

  managementOperation({
    method: 'POST',
    url: '/:sub_id/credits/grants/:grant_id/void',
    ...subAccountOperation('sub_accounts:write', 'voidCreditGrant', {
      params: CreditGrantParams,
      response: { 200: CreditGrant },
    }),
    async handler(request, _reply, { sql, cache }) {
      const sub = await ownSubAccount(sql, request, request.params.sub_id)
      const id = pathUuid(request.params.grant_id, 'credit grant')
      const row = await voidCreditsWithEvent(sql, originOf(request), parentOf(request).id, sub.id, id)
      if (row === null) throw notFound('credit grant')
      await cache.invalidate(subAccountEntries(parentOf(request).id, sub.id))
      return presentCreditGrant(row)
    },
  }),
]

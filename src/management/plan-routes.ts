// Plans of the calling parent: create, list, get, change and delete (docs/api.md, Plans); and the
// account's settings, whose `default_plan_id` is the plan of its sub-accounts without one. A
// change of a plan is one row and one cache entry (`plan:<id>`) dropped on every replica: its
// sub-accounts name it, and the limiter reads its limits through it (limits/subjects.ts).
import { Type } from 'typebox'
import { cacheKeys } from '../cache/index.js'
import { recordEvent, markClaim } from '../events/record.js'
import { storedKeyPolicy } from '../guardrails/key-policy.js'
import { MANAGEMENT_PREFIX } from '../shared/paths.js'
import { presentPlan } from '../schemas/present.js'
import { NoQuery, PAGE_LIMIT_DEFAULT, PageQuery } from '../schemas/common.js'
import {
  AccountSettings,
  CreatePlanBody,
  Plan,
  PlanPage,
  PlanParams,
  UpdateAccountSettingsBody,
  UpdatePlanBody,
} from '../schemas/plans.js'
import { getPlan, listPlans, lockedDefaultPlan, setDefaultPlan } from '../store/plans.js'
import { getTenant } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'
import { bodyLimits } from './body-limits.js'
import {
  type ManagementContext,
  managementOperation,
  notFound,
  operation,
  originOf,
  parentOf,
  pathUuid,
  trimmedName,
} from './common.js'
import type { OperationTable } from './operation-table.js'
import { createPlanWithEvent, deletePlanWithEvent, updatePlanWithEvent } from './plan-changes.js'
import { checkOwnPlan, withPlanStillThere } from './sub-account-plans.js'

export const PLANS_PATH = '/plans'
export const SETTINGS_PATH = '/settings'

const notFoundPlan = () => notFound('plan')

/** The plans' create, list, get, change and delete, then the settings, in the order they are registered. */
export const PLAN_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: PLANS_PATH,
    schema: { ...operation('createPlan'), body: CreatePlanBody, response: { 201: Plan } },
    config: { scope: 'sub_accounts:write' },
    async handler(request, reply, { sql }) {
      const { body } = request
      const row = await createPlanWithEvent(sql, originOf(request), parentOf(request).id, {
        name: trimmedName(body.name, '/body/name'),
        limits: bodyLimits(body.limits ?? null),
        keyPolicy: storedKeyPolicy(body.key_policy ?? null, '/body/key_policy'),
        metadata: body.metadata ?? {},
      })
      return reply.code(201).header('location', `${MANAGEMENT_PREFIX}${PLANS_PATH}/${row.id}`).send(presentPlan(row))
    },
  }),

  managementOperation({
    method: 'GET',
    url: PLANS_PATH,
    schema: { ...operation('listPlans'), querystring: PageQuery, response: { 200: PlanPage } },
    config: { scope: 'sub_accounts:read' },
    async handler(request, _reply, { sql, cursors }) {
      const { limit = PAGE_LIMIT_DEFAULT, cursor } = request.query
      const scope = { list: 'plans', owner: parentOf(request).id } as const
      const afterSeq = await cursors.decode(cursor, scope)
      const rows = await listPlans(sql, parentOf(request).id, { limit: limit + 1, afterSeq })
      return cursors.page(rows, limit, presentPlan, scope)
    },
  }),

  managementOperation({
    method: 'GET',
    url: `${PLANS_PATH}/:plan_id`,
    schema: { ...operation('getPlan'), params: PlanParams, response: { 200: Plan } },
    config: { scope: 'sub_accounts:read' },
    async handler(request, _reply, { sql }) {
      const row = await getPlan(sql, parentOf(request).id, pathUuid(request.params.plan_id, 'plan'))
      if (row === null) throw notFoundPlan()
      return presentPlan(row)
    },
  }),

  managementOperation({
    method: 'PATCH',
    url: `${PLANS_PATH}/:plan_id`,
    schema: { ...operation('updatePlan'), params: PlanParams, body: UpdatePlanBody, response: { 200: Plan } },
    config: { scope: 'sub_accounts:write' },
    async handler(request, _reply, { sql, cache }) {
      const { body } = request
      const id = pathUuid(request.params.plan_id, 'plan')
      const updated = await updatePlanWithEvent(sql, originOf(request), parentOf(request).id, id, {
        ...(body.name === undefined ? {} : { name: trimmedName(body.name, '/body/name') }),
        // Replaced as a whole, as a sub-account's: a member left out is null.
        ...(body.limits === undefined ? {} : { limits: bodyLimits(body.limits) }),
        ...(body.key_policy === undefined ? {} : { keyPolicy: storedKeyPolicy(body.key_policy, '/body/key_policy') }),
        ...(body.metadata === undefined ? {} : { metadata: body.metadata }),
      })
      if (updated === null) throw notFoundPlan()
      // One entry, however many sub-accounts hold the plan: each replica reads it again.
      if (updated.changed) await cache.invalidate([cacheKeys.plan(id)])
      return presentPlan(updated.row)
    },
  }),

  managementOperation({
    method: 'DELETE',
    url: `${PLANS_PATH}/:plan_id`,
    schema: {
      ...operation('deletePlan'),
      params: PlanParams,
      response: { 204: Type.Null({ description: 'Deleted; no body' }) },
    },
    config: { scope: 'sub_accounts:write' },
    async handler(request, reply, { sql, cache }) {
      const id = pathUuid(request.params.plan_id, 'plan')
      if (!(await deletePlanWithEvent(sql, originOf(request), parentOf(request).id, id))) throw notFoundPlan()
      await cache.invalidate([cacheKeys.plan(id)])
      return reply.code(204).send(null)
    },
  }),

  managementOperation({
    method: 'GET',
    url: SETTINGS_PATH,
    schema: { ...operation('getAccountSettings'), querystring: NoQuery, response: { 200: AccountSettings } },
    config: { scope: 'sub_accounts:read' },
    async handler(request, _reply, { sql }) {
      const account = await getTenant(sql, parentOf(request).id)
      return { default_plan_id: account?.default_plan_id ?? null }
    },
  }),

  managementOperation({
    method: 'PATCH',
    url: SETTINGS_PATH,
    schema: {
      ...operation('updateAccountSettings'),
      body: UpdateAccountSettingsBody,
      response: { 200: AccountSettings },
    },
    config: { scope: 'sub_accounts:write' },
    async handler(request, _reply, { sql, cache }) {
      const accountId = parentOf(request).id
      const planId = request.body.default_plan_id?.toLowerCase() ?? null
      await checkOwnPlan(sql, accountId, planId, '/body/default_plan_id')
      const origin = originOf(request)
      const changed = await withPlanStillThere('/body/default_plan_id', () =>
        inTransaction(sql, async (tx) => {
          const previous = await lockedDefaultPlan(tx, accountId)
          if (previous === planId) {
            await markClaim(tx, origin, { type: 'account', id: accountId })
            return false
          }
          await setDefaultPlan(tx, accountId, planId)
          await recordEvent(tx, origin, {
            accountId,
            type: 'account.settings_updated',
            target: { type: 'account', id: accountId },
            object: { default_plan_id: planId },
            previous: { default_plan_id: previous },
          })
          return true
        }),
      )
      // The account's record names its default plan (the limiter reads it for its sub-accounts).
      if (changed) await cache.invalidate([cacheKeys.tenant(accountId)])
      return { default_plan_id: planId }
    },
  }),
]

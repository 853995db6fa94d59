// Plans of the calling parent: create, list, get, change and delete (docs/api.md, Plans); the
// account's `default_plan_id` is in its settings (settings-routes.ts). A
// change of a plan is one row and one cache entry (`plan:<id>`) dropped on every replica: its
// sub-accounts name it, and the limiter reads its limits through it (limits/subjects.ts).
import { Type } from 'typebox'
import { cacheKeys } from '../cache/index.js'
import { storedKeyPolicy } from '../guardrails/key-policy.js'
import { MANAGEMENT_PREFIX } from '../shared/paths.js'
import { presentPlan } from '../schemas/present.js'
import { CreatePlanBody, Plan, PlanPage, PlanParams, UpdatePlanBody } from '../schemas/plans.js'
import { getPlan, listPlans } from '../store/plans.js'
import { bodyLimits } from './body-limits.js'
import {
  type ManagementContext,
  managementOperation,
  notFound,
  originOf,
  parentOf,
  pathUuid,
  trimmedName,
} from './common.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation, parentListOperation } from './operation-shapes.js'
import { createPlanWithEvent, deletePlanWithEvent, updatePlanWithEvent } from './plan-changes.js'

export const PLANS_PATH = '/plans'

const notFoundPlan = () => notFound('plan')

/** The plans' create, list, get, change and delete, in the order they are registered. */
export const PLAN_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: PLANS_PATH,
    ...accountOperation('sub_accounts:write', 'createPlan', { body: CreatePlanBody, response: { 201: Plan } }),
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

  parentListOperation({
    url: PLANS_PATH,
    id: 'listPlans',
    list: 'plans',
    response: PlanPage,
    rows: listPlans,
    present: presentPlan,
  }),

  managementOperation({
    method: 'GET',
    url: `${PLANS_PATH}/:plan_id`,
    ...accountOperation('sub_accounts:read', 'getPlan', { params: PlanParams, response: { 200: Plan } }),
    async handler(request, _reply, { sql }) {
      const row = await getPlan(sql, parentOf(request).id, pathUuid(request.params.plan_id, 'plan'))
      if (row === null) throw notFoundPlan()
      return presentPlan(row)
    },
  }),

  managementOperation({
    method: 'PATCH',
    url: `${PLANS_PATH}/:plan_id`,
    ...accountOperation('sub_accounts:write', 'updatePlan', {
      params: PlanParams,
      body: UpdatePlanBody,
      response: { 200: Plan },
    }),
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
    ...accountOperation('sub_accounts:write', 'deletePlan', {
      params: PlanParams,
      response: { 204: Type.Null({ description: 'Deleted; no body' }) },
    }),
    async handler(request, reply, { sql, cache }) {
      const id = pathUuid(request.params.plan_id, 'plan')
      if (!(await deletePlanWithEvent(sql, originOf(request), parentOf(request).id, id))) throw notFoundPlan()
      await cache.invalidate([cacheKeys.plan(id)])
      return reply.code(204).send(null)
    },
  }),
]

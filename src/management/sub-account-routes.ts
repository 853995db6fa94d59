// Sub-accounts: create, list, get, update, deactivate and reactivate (docs/api.md, Sub-accounts).
import { cacheKeys, subAccountEntries } from '../cache/index.js'
import { listSubAccounts } from '../store/sub-account-list.js'
import { storedKeyPolicy } from '../guardrails/key-policy.js'
import { bodyLimits } from './body-limits.js'
import { allowedPlacement } from './placement.js'
import {
  type ManagementContext,
  managementOperation,
  notFound,
  originOf,
  ownSubAccount,
  parentOf,
  pathUuid,
  trimmedName,
  withConflictAsHttp,
} from './common.js'
import { MANAGEMENT_PREFIX } from '../shared/paths.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation, subAccountOperation } from './operation-shapes.js'
import { presentSubAccount } from '../schemas/present.js'
import { checkOwnPlan, planFinder, presentOne, withPlanStillThere } from './sub-account-plans.js'
import { createSubAccountWithEvent, setStatusWithEvent, updateSubAccountWithEvent } from './sub-account-changes.js'
import { listScope, listStart, parseInclude, sortsByName, withFigures } from './sub-account-list.js'
import {
  CreateSubAccountBody,
  GetSubAccountQuery,
  ListSubAccountsQuery,
  SubAccount,
  SubAccountPage,
  SubAccountWithFigures,
  UpdateSubAccountBody,
} from '../schemas/sub-accounts.js'
import { PAGE_LIMIT_DEFAULT } from '../schemas/common.js'

/** The create and the list, on the prefix itself, in the order they are registered. */
export const SUB_ACCOUNT_COLLECTION_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: '/',
    ...accountOperation('sub_accounts:write', 'createSubAccount', {
      body: CreateSubAccountBody,
      response: { 201: SubAccount },
    }),
    async handler(request, reply, { sql, cache }) {
      const body = request.body
      const parentId = parentOf(request).id
      const input = {
        name: trimmedName(body.name, '/body/name'),
        externalId: body.external_id ?? null,
        metadata: body.metadata ?? {},
        limits: bodyLimits(body.limits ?? null),
        keyPolicy: storedKeyPolicy(body.key_policy ?? null, '/body/key_policy'),
        planId: body.plan_id?.toLowerCase() ?? null,
        placement: (await allowedPlacement(sql, parentId, body.placement)) ?? null,
      }
      await checkOwnPlan(sql, parentId, input.planId, '/body/plan_id')
      const row = await withPlanStillThere('/body/plan_id', () =>
        withConflictAsHttp(() => createSubAccountWithEvent(sql, originOf(request), parentId, input)),
      )
      // A "not found" for its id or external_id may be cached, and the parent's active count changed.
      await cache.invalidate([
        ...subAccountEntries(row.parent_id!, row.id),
        cacheKeys.anyActive(row.parent_id!),
        ...(row.external_id === null ? [] : [cacheKeys.externalId(row.parent_id!, row.external_id)]),
      ])
      return reply
        .code(201)
        .header('location', `${MANAGEMENT_PREFIX}/${row.id}`)
        .send(await presentOne(sql, parentId, row))
    },
  }),

  managementOperation({
    method: 'GET',
    url: '/',
    ...accountOperation('sub_accounts:read', 'listSubAccounts', {
      querystring: ListSubAccountsQuery,
      response: { 200: SubAccountPage },
    }),
    async handler(request, _reply, { sql, cursors }) {
      const { limit = PAGE_LIMIT_DEFAULT, cursor, status, external_id, q, sort = 'created_at' } = request.query
      const parentId = parentOf(request).id
      // A cursor is bound to the filters and the sort too: replayed under others it would skip
      // their earlier rows. Without filters the owner is the parent alone, as before filters were bound.
      const filters = [status, external_id, q].some((f) => f !== undefined)
        ? `?${JSON.stringify([status ?? null, external_id ?? null, q ?? null])}`
        : ''
      const owner = `${parentId}${filters}`
      const rows = await listSubAccounts(sql, parentId, {
        limit: limit + 1,
        ...(await listStart(cursors, cursor, owner, sort)),
        sort,
        status: status ?? null,
        externalId: external_id ?? null,
        search: q ?? null,
      })
      const planOf = await planFinder(sql, parentId, rows)
      const page = await cursors.page(
        rows,
        limit,
        (row) => presentSubAccount(row, planOf(row)),
        listScope(owner, sort),
        sortsByName(sort) ? (row) => row.sort_key! : undefined,
      )
      return { ...page, data: await withFigures(sql, parentId, page.data, parseInclude(request.query.include)) }
    },
  }),
]

/** Deactivate or reactivate: the sub-account's status set, its cached entries told. */
const setStatus = (action: 'deactivate' | 'reactivate', status: 'deactivated' | 'active') =>
  managementOperation({
    method: 'POST',
    url: `/:sub_id/${action}`,
    ...subAccountOperation('sub_accounts:write', `${action}SubAccount`, { response: { 200: SubAccount } }),
    async handler(request, _reply, { sql, cache }) {
      const result = await setStatusWithEvent(
        sql,
        originOf(request),
        parentOf(request).id,
        pathUuid(request.params.sub_id),
        status,
      )
      if (result === null) throw notFound()
      const { row } = result
      await cache.invalidate([...subAccountEntries(row.parent_id!, row.id), cacheKeys.anyActive(row.parent_id!)])
      return presentOne(sql, row.parent_id!, row)
    },
  })

/** One sub-account by its id: get, update, deactivate, reactivate, in the order they are registered. */
export const SUB_ACCOUNT_ITEM_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/:sub_id',
    ...subAccountOperation('sub_accounts:read', 'getSubAccount', {
      querystring: GetSubAccountQuery,
      response: { 200: SubAccountWithFigures },
    }),
    async handler(request, _reply, { sql }) {
      const sub = await presentOne(sql, parentOf(request).id, await ownSubAccount(sql, request, request.params.sub_id))
      const [shown] = await withFigures(sql, parentOf(request).id, [sub], parseInclude(request.query.include))
      return shown!
    },
  }),

  managementOperation({
    method: 'PATCH',
    url: '/:sub_id',
    ...subAccountOperation('sub_accounts:write', 'updateSubAccount', {
      body: UpdateSubAccountBody,
      response: { 200: SubAccount },
    }),
    async handler(request, _reply, { sql, cache }) {
      const body = request.body
      const name = body.name === undefined ? undefined : trimmedName(body.name, '/body/name')
      const subId = pathUuid(request.params.sub_id)
      const parentId = parentOf(request).id
      const planId = body.plan_id === undefined ? undefined : (body.plan_id?.toLowerCase() ?? null)
      await checkOwnPlan(sql, parentId, planId, '/body/plan_id')
      const placement = await allowedPlacement(sql, parentId, body.placement)
      // The update is scoped to the parent: no row back means unknown or another parent's.
      const updated = await withPlanStillThere('/body/plan_id', () =>
        withConflictAsHttp(() =>
          updateSubAccountWithEvent(sql, originOf(request), parentId, subId, {
            name,
            externalId: body.external_id,
            metadata: body.metadata,
            // The whole object is replaced: a member left out is null, and null clears both.
            limits: body.limits === undefined ? undefined : bodyLimits(body.limits),
            keyPolicy: body.key_policy === undefined ? undefined : storedKeyPolicy(body.key_policy, '/body/key_policy'),
            planId,
            placement,
          }),
        ),
      )
      if (updated === null) throw notFound()
      const { row, previousExternalId } = updated
      const externalIdMoved = row.external_id !== previousExternalId
      // The cached records carry the external id, the limits, the policy's allow-list, the plan
      // and the placement (the proxy reads them from there). The eviction's message also closes the
      // sub-account's WebSockets on a cell it left (proxy/websocket/placement.ts).
      if (
        externalIdMoved ||
        body.limits !== undefined ||
        body.key_policy !== undefined ||
        planId !== undefined ||
        body.placement !== undefined
      ) {
        await cache.invalidate(
          [row.external_id, previousExternalId]
            .filter((externalId) => externalIdMoved && externalId !== null)
            .map((externalId) => cacheKeys.externalId(row.parent_id!, externalId!))
            .concat(subAccountEntries(row.parent_id!, row.id)),
        )
      }
      return presentOne(sql, parentId, row)
    },
  }),

  setStatus('deactivate', 'deactivated'),
  setStatus('reactivate', 'active'),
]

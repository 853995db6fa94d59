// The portal's own API (docs/api.md, Portal sessions): what a session may see and do, for its one
// sub-account only, each route behind the permission it needs. Keys are minted, rolled and revoked
// through the management API's own functions (management/key-actions.ts), under the same key
// policy and scope ceiling, and their events name the session as their actor.
import type { Alerts } from '../alerts/plugin.js'
import type { FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { DEFAULT_ROLL_OVERLAP_SECONDS } from '../shared/key-expiry.js'
import type { CacheInvalidator } from '../cache/index.js'
import { ApiError } from '../errors.js'
import { portalOrigin } from '../events/record.js'
import { monthOf } from '../limits/month.js'
import { monthUse } from '../limits/store.js'
import { effectiveLimits } from '../shared/plan-limits.js'
import { shownLimits } from '../shared/tenant-limits.js'
import { planInForceOf } from '../store/plans.js'
import type { ManagementApp } from '../management/common.js'
import {
  checkedMintBody,
  type KeyActionContext,
  mintSubAccountKey,
  noBodyIsEmpty,
  revokeSubAccountKey,
  rollSubAccountKey,
  withSecrets,
} from '../management/key-actions.js'
import { type Cursors, keyListScope } from '../management/paging.js'
import { presentKey } from '../schemas/present.js'
import { defineOperation, type OperationTable, registerOperations } from '../management/operation-table.js'
import { type OwnerLookups, requestFilter, requestPage } from '../management/request-routes.js'
import { RequestPage, RequestsQuery } from '../schemas/requests.js'
import { ApiKey, ApiKeyPage, MintedApiKey, MintKeyBody, RollKeyBody } from '../schemas/keys.js'
import { Limits } from '../schemas/limits.js'
import { PAGE_LIMIT_DEFAULT, PageQuery } from '../schemas/common.js'
import { UsageEntry } from '../schemas/usage.js'
import type { Sql } from '../store/db.js'
import { listKeys } from '../store/api-keys.js'
import { getTenant } from '../store/tenants.js'
import { readUsage } from '../usage/report.js'
import { isUuid } from '../shared/identifiers.js'
import { checkPermission, sessionOf } from './session-auth.js'
import { PORTAL_CREDIT_OPERATIONS } from './credit-routes.js'
import { portalPlaces, type RequestLogReader } from '../management/log-reads.js'

export interface PortalApiContext {
  sql: Sql
  cache: CacheInvalidator
  cursors: Cursors
  /** The request log's reader; null when it is off. */
  requestLog: RequestLogReader | null
  /** Told the end of each key minted or rolled (the alerts'). */
  keyMinted: Alerts['keyMinted']
}

const KeyIdParams = Type.Object({ key_id: Type.String() })
// The parent's query but `sub_account_id`: the session's own is the only one (an unknown parameter is a 400).
const { sub_account_id: _bySubAccount, ...portalRequestFilters } = RequestsQuery.properties
const PortalRequestsQuery = Type.Object(portalRequestFilters, { additionalProperties: false })
const PortalUsage = Type.Object(
  {
    month: Type.String(),
    used: Type.Integer({ minimum: 0 }),
    limits: Limits,
    usage: Type.Union([UsageEntry, Type.Null()]),
  },
  { additionalProperties: false },
)

const keyId = (value: string) => {
  if (!isUuid(value)) throw new ApiError('not_found', 'no such key')
  return value.toLowerCase()
}

/** What the operations are given: the plugin's context, and the tenancy lookups of the request log's filters. */
interface PortalApiOperationContext extends PortalApiContext {
  ownerLookups: () => OwnerLookups
}

/** Every operation is left out of the OpenAPI document. */
const hidden = { hide: true } as const

/** The session's sub-account, fresh from Postgres (its key policy may have changed), and who acts. */
async function keyContext(
  request: FastifyRequest,
  { sql, cache, keyMinted }: PortalApiContext,
): Promise<KeyActionContext> {
  const session = sessionOf(request)
  const subAccount = await getTenant(sql, session.sub_account_id)
  if (subAccount === null || subAccount.status !== 'active')
    throw new ApiError('unauthenticated', 'the portal session has ended: ask your provider for a new portal link')
  return {
    sql,
    cache,
    origin: portalOrigin(session.id, request.id, request.ip),
    parentId: session.account_id,
    subAccount,
    keyMinted,
  }
}

const portalOperation = defineOperation<PortalApiOperationContext>()

/** The portal API's operations, in the order they are registered, each behind its permission. */
export const PORTAL_API_OPERATIONS: OperationTable<PortalApiOperationContext> = [
  portalOperation({
    method: 'GET',
    url: '/keys',
    schema: { ...hidden, querystring: PageQuery, response: { 200: ApiKeyPage } },
    config: { permission: 'keys:read' },
    async handler(request, _reply, { sql, cursors }) {
      const session = sessionOf(request)
      const { limit = PAGE_LIMIT_DEFAULT, cursor } = request.query
      const scope = keyListScope(session.account_id, session.sub_account_id)
      const afterSeq = await cursors.decode(cursor, scope)
      const rows = await listKeys(sql, session.sub_account_id, { limit: limit + 1, afterSeq })
      const nowMs = Date.now()
      return cursors.page(rows, limit, (row) => presentKey(row, nowMs), scope)
    },
  }),

  portalOperation({
    method: 'POST',
    url: '/keys',
    schema: { ...hidden, body: MintKeyBody, response: { 201: MintedApiKey } },
    config: { permission: 'keys:write' },
    async handler(request, reply, context) {
      const mint = checkedMintBody(request.body)
      const minted = await mintSubAccountKey(await keyContext(request, context), mint)
      // The key and its secret are in this response only.
      return reply
        .code(201)
        .header('cache-control', 'no-store')
        .send(withSecrets(minted.row, minted.apiKey, minted.clientSecret!))
    },
  }),

  portalOperation({
    method: 'POST',
    url: '/keys/:key_id/revoke',
    schema: { ...hidden, params: KeyIdParams, response: { 200: ApiKey } },
    config: { permission: 'keys:write' },
    handler: async (request, _reply, context) =>
      presentKey(await revokeSubAccountKey(await keyContext(request, context), keyId(request.params.key_id))),
  }),

  portalOperation({
    method: 'POST',
    url: '/keys/:key_id/roll',
    schema: { ...hidden, params: KeyIdParams, body: RollKeyBody, response: { 201: MintedApiKey } },
    config: { permission: 'keys:write' },
    preValidation: noBodyIsEmpty,
    async handler(request, reply, context) {
      const { minted } = await rollSubAccountKey(
        await keyContext(request, context),
        keyId(request.params.key_id),
        request.body.expires_in_seconds ?? DEFAULT_ROLL_OVERLAP_SECONDS,
      )
      return reply
        .code(201)
        .header('cache-control', 'no-store')
        .send(withSecrets(minted.row, minted.apiKey, minted.clientSecret!))
    },
  }),

  // This month's use against the sub-account's own quota, and its requests by day and status.
  portalOperation({
    method: 'GET',
    url: '/usage',
    schema: { ...hidden, response: { 200: PortalUsage } },
    config: { permission: 'usage:read' },
    async handler(request, _reply, { sql }) {
      const session = sessionOf(request)
      const nowMs = Date.now()
      const month = monthOf(nowMs)
      const [subAccount, used, entries] = await Promise.all([
        getTenant(sql, session.sub_account_id),
        monthUse(sql, { tenantId: session.sub_account_id, level: 'sub_account' }, month),
        readUsage(
          sql,
          session.account_id,
          {
            from: `${month}-01`,
            to: new Date(nowMs).toISOString().slice(0, 10),
            afterSeq: null,
            limit: 1,
            subAccountId: session.sub_account_id,
          },
          'day',
        ),
      ])
      const entry = entries[0]
      let usage: UsageEntry | null = null
      if (entry !== undefined) {
        const { seq: _seq, ...rest } = entry
        usage = rest
      }
      // The limits in force: its own, filled in from its plan (docs/api.md, Plans).
      const plan = subAccount === null ? null : await planInForceOf(sql, subAccount)
      return { month, used, limits: shownLimits(effectiveLimits(subAccount?.limits, plan?.limits)), usage }
    },
  }),

  portalOperation({
    method: 'GET',
    url: '/requests',
    schema: { ...hidden, querystring: PortalRequestsQuery, response: { 200: RequestPage } },
    config: { permission: 'requests:read' },
    async handler(request, _reply, { cursors, requestLog, ownerLookups }) {
      const session = sessionOf(request)
      const { limit = PAGE_LIMIT_DEFAULT } = request.query
      // Its own cursors: a parent's cursor of the whole account's log does not page this one.
      const scope = { list: 'requests', owner: `${session.account_id}/${session.sub_account_id}` } as const
      const beforeSeq = await cursors.decode(request.query.cursor, scope)
      const filter = requestFilter(request.query)
      if (requestLog === null) return { data: [], next_cursor: null }
      const tenantId = session.sub_account_id
      const page = await requestPage(
        requestLog,
        ownerLookups(),
        session.account_id,
        portalPlaces(session.account_id, tenantId),
        { ...filter, tenantId, beforeSeq },
        limit,
        cursors,
        scope,
      )
      // The parent's shadow limits are its own trial, not its customer's to see.
      return { ...page, data: page.data.map(({ would_refuse: _, ...record }) => record) }
    },
  }),
]

/** On the session's scope: each operation's permission checked just before its handler, then the table. */
export function registerPortalApiRoutes(app: ManagementApp, context: PortalApiContext): void {
  app.addHook('preHandler', checkPermission)
  registerOperations(app, [...PORTAL_API_OPERATIONS, ...PORTAL_CREDIT_OPERATIONS], {
    ...context,
    ownerLookups: () => app.tenancyCache.lookups,
  })
}

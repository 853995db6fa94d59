// Portal sessions of a sub-account (docs/api.md, Portal sessions): the parent makes one for its
// sub-account's people, lists the open ones and ends one. The session's link carries a one-time
// token that only the create response shows; the portal itself is under /portal (src/portal/).
import { randomUUID } from 'node:crypto'
import { Type } from 'typebox'
import { recordEvent } from '../events/record.js'
import { ApiError, validationFailed } from '../errors.js'
import { generateLinkToken } from '../auth/portal-credentials.js'
import { PORTAL_PREFIX } from '../shared/paths.js'
import {
  countOpenPortalSessions,
  endPortalSession,
  insertPortalSession,
  listOpenPortalSessions,
  type PortalSessionRow,
} from '../store/portal-sessions.js'
import { inTransaction } from '../store/transaction.js'
import {
  type ManagementContext,
  managementOperation,
  notFound,
  originOf,
  ownSubAccount,
  parentOf,
  pathUuid,
} from './common.js'
import {
  CreatedPortalSession,
  CreatePortalSessionBody,
  PORTAL_SESSION_TTL,
  type PortalSession,
  PortalSessionList,
  PortalSessionParams,
} from '../schemas/portal-sessions.js'
import type { OperationTable } from './operation-table.js'
import { subAccountOperation } from './operation-shapes.js'

/** A sub-account's open sessions at most: the list needs no paging, and a leaked parent key cannot hand out links without bound. */
export const OPEN_PORTAL_SESSIONS_MAX = 50

export function presentPortalSession(row: PortalSessionRow): PortalSession {
  return {
    id: row.id,
    sub_account_id: row.sub_account_id,
    permissions: row.permissions,
    return_url: row.return_url,
    created_at: row.created_at.toISOString(),
    expires_at: row.expires_at.toISOString(),
    link_used: row.token_used_at !== null,
  }
}

/** An https URL, or a 400 saying what it must be. */
function returnUrl(raw: string | undefined): string | null {
  if (raw === undefined) return null
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw validationFailed([{ path: '/body/return_url', message: 'must be an absolute https URL' }])
  }
  if (url.protocol !== 'https:' || url.username !== '' || url.password !== '')
    throw validationFailed([{ path: '/body/return_url', message: 'must be an https URL without user or password' }])
  return url.href
}

/** A sub-account's portal sessions: create, list, end, in the order they are registered (with the portal only). */
export const PORTAL_SESSION_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: '/:sub_id/portal-sessions',
    ...subAccountOperation('sub_accounts:write', 'createPortalSession', {
      body: CreatePortalSessionBody,
      response: { 201: CreatedPortalSession },
    }),
    async handler(request, reply, { sql, portalIssuerUrl }) {
      const back = returnUrl(request.body.return_url)
      const subAccount = await ownSubAccount(sql, request, request.params.sub_id)
      if (subAccount.status !== 'active')
        throw validationFailed([
          { path: '/params/sub_id', message: 'the sub-account is deactivated: reactivate it first' },
        ])
      const parentId = parentOf(request).id
      const origin = originOf(request)
      const { token, tokenDigest } = generateLinkToken()
      const row = await inTransaction(sql, async (tx) => {
        // Serializes this sub-account's creations, so that the cap holds under concurrency.
        await tx`select pg_advisory_xact_lock(hashtextextended(${`portal_sessions:${subAccount.id}`}, 0))`
        if ((await countOpenPortalSessions(tx, subAccount.id)) >= OPEN_PORTAL_SESSIONS_MAX)
          throw new ApiError(
            'limit_reached',
            `the sub-account has ${OPEN_PORTAL_SESSIONS_MAX} open portal sessions: end one (DELETE) or let one expire`,
          )
        const session = await insertPortalSession(tx, {
          id: randomUUID(),
          subAccountId: subAccount.id,
          accountId: parentId,
          permissions: request.body.permissions,
          returnUrl: back,
          tokenDigest,
          expiresInSeconds: request.body.expires_in_seconds ?? PORTAL_SESSION_TTL.default,
        })
        await recordEvent(tx, origin, {
          accountId: parentId,
          type: 'portal_session.created',
          target: { type: 'portal_session', id: session.id },
          object: presentPortalSession(session),
          previous: null,
        })
        return session
      })
      // The token is in this response only: nothing on the way may keep a copy. It is in the
      // fragment, which browsers never send (portal/plugin.ts: who may frame the page).
      const url = `${portalIssuerUrl}${PORTAL_PREFIX}/#${token}`
      return reply
        .code(201)
        .header('cache-control', 'no-store')
        .send({ ...presentPortalSession(row), url })
    },
  }),

  managementOperation({
    method: 'GET',
    url: '/:sub_id/portal-sessions',
    ...subAccountOperation('sub_accounts:read', 'listPortalSessions', { response: { 200: PortalSessionList } }),
    async handler(request, _reply, { sql }) {
      const subAccount = await ownSubAccount(sql, request, request.params.sub_id)
      const rows = await listOpenPortalSessions(sql, subAccount.id, OPEN_PORTAL_SESSIONS_MAX)
      return { data: rows.map(presentPortalSession) }
    },
  }),

  managementOperation({
    method: 'DELETE',
    url: '/:sub_id/portal-sessions/:session_id',
    ...subAccountOperation('sub_accounts:write', 'deletePortalSession', {
      params: PortalSessionParams,
      response: { 204: Type.Null({ description: 'Ended (or it already was); no body' }) },
    }),
    async handler(request, reply, { sql }) {
      const subAccount = await ownSubAccount(sql, request, request.params.sub_id)
      const sessionId = pathUuid(request.params.session_id, 'portal session')
      const origin = originOf(request)
      const parentId = parentOf(request).id
      const ended = await inTransaction(sql, async (tx) => {
        const result = await endPortalSession(tx, subAccount.id, sessionId)
        if (result?.changed === true)
          await recordEvent(tx, origin, {
            accountId: parentId,
            type: 'portal_session.ended',
            target: { type: 'portal_session', id: result.row.id },
            object: {
              ...presentPortalSession(result.row),
              ended_at: result.row.ended_at!.toISOString(),
              ended_reason: 'deleted',
            },
            previous: { ended_at: null },
          })
        return result
      })
      if (ended === null) throw notFound('portal session')
      // Every lookup of a session reads Postgres (portal/session-auth.ts): nothing cached to tell.
      return reply.code(204).send(null)
    },
  }),
]

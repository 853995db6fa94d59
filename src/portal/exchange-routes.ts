// The portal's session (docs/api.md, Portal sessions): the page exchanges the link's one-time
// token for the session's credential, once, and asks what its session may do. The token comes in
// the body (never in a URL: it would reach logs and Referer headers).
import type { FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { ApiError } from '../errors.js'
import type { ManagementApp } from '../management/common.js'
import type { Sql } from '../store/db.js'
import { exchangePortalToken, type PortalSessionRow } from '../store/portal-sessions.js'
import { getTenant } from '../store/tenants.js'
import { digest, generateSessionSecret, isWellFormedLinkToken } from './credentials.js'
import { PORTAL_PREFIX } from './paths.js'
import { SESSION_COOKIE, sessionAuth, sessionOf } from './session-auth.js'

const ExchangeBody = Type.Object(
  {
    token: Type.String({ minLength: 1, maxLength: 200, description: "the fragment of the portal link, without '#'" }),
    embedded: Type.Optional(
      Type.Boolean({ description: 'true: answer the session token in the body (held in memory) instead of a cookie' }),
    ),
  },
  { additionalProperties: false },
)

const SessionInfo = Type.Object(
  {
    id: Type.String(),
    sub_account: Type.Object(
      { id: Type.String(), name: Type.String(), external_id: Type.Union([Type.String(), Type.Null()]) },
      { additionalProperties: false },
    ),
    permissions: Type.Array(Type.String()),
    expires_at: Type.String(),
    return_url: Type.Union([Type.String(), Type.Null()]),
    session_token: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
)

const USED =
  'this portal link has already been used, has expired, or was ended: ask your provider for a new one (a link works once)'

async function sessionInfo(sql: Sql, session: PortalSessionRow) {
  const subAccount = await getTenant(sql, session.sub_account_id)
  if (subAccount === null) throw new ApiError('unauthenticated', USED)
  return {
    id: session.id,
    sub_account: { id: subAccount.id, name: subAccount.name, external_id: subAccount.external_id },
    permissions: session.permissions,
    expires_at: session.expires_at.toISOString(),
    return_url: session.return_url,
  }
}

/** Secure when the page is served over https: as the request came, or as ISSUER_URL (the link's origin) says. */
const isHttps = (request: FastifyRequest, issuerUrl: string) =>
  request.protocol === 'https' || issuerUrl.startsWith('https:')

export function registerExchangeRoutes(app: ManagementApp, sql: Sql, issuerUrl: string): void {
  const hidden = { hide: true }
  app.post(
    '/session',
    { schema: { ...hidden, body: ExchangeBody, response: { 201: SessionInfo } } },
    async (request, reply) => {
      const { token, embedded = false } = request.body
      // Only the portal's own page exchanges a link: a browser that says another site sent the
      // request (a login CSRF, planting the attacker's session) is refused.
      const site = request.headers['sec-fetch-site']
      if (site !== undefined && site !== 'same-origin' && site !== 'none')
        throw new ApiError('insufficient_scope', 'a portal link is exchanged by the portal page only')
      if (!isWellFormedLinkToken(token)) throw new ApiError('unauthenticated', USED)
      const { secret, secretDigest } = generateSessionSecret()
      const session = await exchangePortalToken(sql, digest(token), secretDigest)
      if (session === null) throw new ApiError('unauthenticated', USED)
      const info = await sessionInfo(sql, session)
      reply.code(201).header('cache-control', 'no-store')
      // Embedded in the parent's page, the portal is a third-party frame: a SameSite=Strict cookie
      // would never come back, so the page holds the token in memory instead (docs/decisions.md).
      if (embedded) return { ...info, session_token: secret }
      const maxAge = Math.max(1, Math.floor((session.expires_at.getTime() - Date.now()) / 1000))
      const attributes = [
        `${SESSION_COOKIE}=${secret}`,
        `Path=${PORTAL_PREFIX}/`,
        `Max-Age=${maxAge}`,
        'HttpOnly',
        'SameSite=Strict',
        ...(isHttps(request, issuerUrl) ? ['Secure'] : []),
      ]
      reply.header('set-cookie', attributes.join('; '))
      return info
    },
  )

  app.get(
    '/session',
    { schema: { ...hidden, response: { 200: SessionInfo } }, onRequest: sessionAuth(sql) },
    async (request, reply) => {
      reply.header('cache-control', 'no-store')
      return sessionInfo(sql, sessionOf(request))
    },
  )
}

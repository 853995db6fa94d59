// The portal's session (docs/api.md, Portal sessions): the page exchanges the link's one-time token
// for the session's credential, once, and asks what its session may do. The token comes in the body
// (never in a URL: it would reach logs and Referer headers). A framed page names the origins that
// frame it, and gets a session only when the link's parent lets each of them embed the portal; the
// answer carries that parent's origins
// (docs/decisions/0191-a-framed-portal-page-gets-its-session-only.md).
import type { FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { ApiError, validationFailed } from '../errors.js'
import type { ManagementApp } from '../management/common.js'
import type { Sql } from '../store/db.js'
import { exchangePortalToken, type PortalSessionRow } from '../store/portal-sessions.js'
import { getTenant } from '../store/tenants.js'
import { effectiveKeyPolicy, shownKeyPolicy } from '../guardrails/key-policy.js'
import { planInForceOf } from '../store/plans.js'
import { KeyPolicy } from '../schemas/keys.js'
import type { PortalCredentialLookups, PortalLink } from './credential-lookups.js'
import { digest, generateSessionSecret, isWellFormedLinkToken } from '../auth/portal-credentials.js'
import { PORTAL_PREFIX } from '../shared/paths.js'
import { SESSION_COOKIE, sessionAuth, sessionOf } from './session-auth.js'
import { defineOperation, type OperationTable, registerOperations } from '../management/operation-table.js'

/** The most frames a page may sit in: more is no embedding a parent would make. */
const ANCESTORS_MAX = 16

const ExchangeBody = Type.Object(
  {
    token: Type.String({ minLength: 1, maxLength: 200, description: "the fragment of the portal link, without '#'" }),
    embedded: Type.Optional(
      Type.Boolean({ description: 'true: answer the session token in the body (held in memory) instead of a cookie' }),
    ),
    ancestor_origins: Type.Optional(
      Type.Array(Type.String({ maxLength: 300 }), {
        maxItems: ANCESTORS_MAX,
        description:
          'with embedded: the origins of the pages that frame the portal, nearest first (location.ancestorOrigins)',
      }),
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
    frame_ancestors: Type.Optional(
      Type.Array(Type.String(), { description: "the origins the link's parent lets embed the portal" }),
    ),
    key_policy: Type.Optional({
      ...KeyPolicy,
      description: "with keys:write: the sub-account's key policy, so that the mint form offers only what it allows",
    }),
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
    // The rules a mint is held to, shown before they are applied (docs/portal.md, Keys).
    // Its own, filled in from its plan (docs/api.md, Plans): the policy a mint is held to.
    ...(session.permissions.includes('keys:write')
      ? {
          key_policy: shownKeyPolicy(
            effectiveKeyPolicy(subAccount.key_policy, (await planInForceOf(sql, subAccount))?.key_policy ?? null),
          ),
        }
      : {}),
  }
}

/** Secure when the page is served over https: as the request came, or as ISSUER_URL (the link's origin) says. */
const isHttps = (request: FastifyRequest, issuerUrl: string) =>
  request.protocol === 'https' || issuerUrl.startsWith('https:')

const shown = (origin: string) => JSON.stringify(origin.length > 80 ? `${origin.slice(0, 80)}…` : origin)

/**
 * A framed page gets a session only when every page framing it is of an origin the link's parent
 * lists (the frame-ancestors rule, applied before the link is taken): else 403, the link kept.
 */
function requireAllowedAncestors(link: PortalLink, ancestors: readonly string[] | undefined): void {
  if (ancestors === undefined || ancestors.length === 0)
    throw new ApiError(
      'insufficient_scope',
      'the portal page could not tell which site frames it, so it cannot open a session there: open the portal link in a window of its own',
    )
  const allowed = link.portalOrigins ?? []
  const stranger = ancestors.find((origin) => !allowed.includes(origin))
  if (stranger !== undefined)
    throw new ApiError(
      'insufficient_scope',
      `this portal link may not be used in a page of ${shown(stranger)}: the provider does not let that site embed its portal; open the link in a window of its own`,
    )
}

/** What the exchange's operations are given. */
interface ExchangeContext {
  sql: Sql
  lookups: PortalCredentialLookups
  /** ISSUER_URL: the links' origin; https there makes the session cookie Secure. */
  issuerUrl: string
}

const exchangeOperation = defineOperation<ExchangeContext>()

/** The exchange, and what the session is, in the order they are registered; out of the OpenAPI document. */
export const EXCHANGE_OPERATIONS: OperationTable<ExchangeContext> = [
  exchangeOperation({
    method: 'POST',
    url: '/session',
    schema: { hide: true, body: ExchangeBody, response: { 201: SessionInfo } },
    async handler(request, reply, { sql, lookups, issuerUrl }) {
      const { token, embedded = false, ancestor_origins: ancestors } = request.body
      // Only the portal's own page exchanges a link: a browser that says another site sent the
      // request (a login CSRF, planting the attacker's session) is refused.
      const site = request.headers['sec-fetch-site']
      if (site !== undefined && site !== 'same-origin' && site !== 'none')
        throw new ApiError('insufficient_scope', 'a portal link is exchanged by the portal page only')
      if (ancestors !== undefined && !embedded)
        throw validationFailed([
          { path: '/ancestor_origins', message: 'goes with "embedded": true, from a framed page only' },
        ])
      if (!isWellFormedLinkToken(token)) throw new ApiError('unauthenticated', USED)
      const tokenDigest = digest(token)
      // Looked up in a paced query first: a made-up link costs no statement of its own.
      const link = await lookups.link(tokenDigest)
      if (link === null) throw new ApiError('unauthenticated', USED)
      if (embedded) requireAllowedAncestors(link, ancestors)
      const { secret, secretDigest } = generateSessionSecret()
      const session = await exchangePortalToken(sql, tokenDigest, secretDigest)
      if (session === null) throw new ApiError('unauthenticated', USED)
      const info = { ...(await sessionInfo(sql, session)), frame_ancestors: link.portalOrigins ?? [] }
      reply.code(201).header('cache-control', 'no-store')
      // Embedded in the parent's page, the portal is a third-party frame: a SameSite=Strict cookie
      // would never come back, so the page holds the token in memory instead
      // (docs/decisions/0193-cookie-for-the-page-bearer-when-embedded.md).
      if (embedded) return { ...info, session_token: secret }
      reply.header('set-cookie', sessionCookie(secret, session, isHttps(request, issuerUrl)))
      return info
    },
  }),

  exchangeOperation({
    method: 'GET',
    url: '/session',
    schema: { hide: true, response: { 200: SessionInfo } },
    onRequest: ({ lookups }) => sessionAuth(lookups),
    async handler(request, reply, { sql }) {
      reply.header('cache-control', 'no-store')
      return sessionInfo(sql, sessionOf(request))
    },
  }),
]

/** The session cookie: its path the portal's, gone when the session expires. */
function sessionCookie(secret: string, session: PortalSessionRow, secure: boolean): string {
  const maxAge = Math.max(1, Math.floor((session.expires_at.getTime() - Date.now()) / 1000))
  const attributes = [
    `${SESSION_COOKIE}=${secret}`,
    `Path=${PORTAL_PREFIX}/`,
    `Max-Age=${maxAge}`,
    'HttpOnly',
    'SameSite=Strict',
    ...(secure ? ['Secure'] : []),
  ]
  return attributes.join('; ')
}

export function registerExchangeRoutes(
  app: ManagementApp,
  sql: Sql,
  lookups: PortalCredentialLookups,
  issuerUrl: string,
): void {
  registerOperations(app, EXCHANGE_OPERATIONS, { sql, lookups, issuerUrl })
}

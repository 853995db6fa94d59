// Who calls the portal's API (docs/api.md, Portal sessions): a portal session, and nothing else.
// Its credential comes as the session cookie (the page at /portal/) or as a bearer (the page
// embedded in the parent's site, where a SameSite=Strict cookie is never sent). API keys and access
// tokens are refused here, as the session's credential is refused by /v1 and the proxy (its shape
// is not a key's, nor a token's). Every call reads Postgres, in a paced query shared with the
// lookups waiting with it (credential-lookups.ts), so that forged credentials cannot drive Postgres
// at their own rate: a session ends at once, on every replica, at DELETE, at its expiry, and when
// its sub-account is deactivated
// (docs/decisions/0194-the-session-is-read-from-postgres-on-every-portal.md).
import type { FastifyRequest } from 'fastify'
import { ApiError } from '../errors.js'
import type { PortalPermission } from '../schemas/portal-sessions.js'
import type { PortalSessionRow } from '../store/portal-sessions.js'
import type { PortalCredentialLookups } from './credential-lookups.js'
import { digest, isWellFormedSessionSecret } from '../auth/portal-credentials.js'

/** The session cookie: HttpOnly, SameSite=Strict, Path=/portal/ (exchange-routes.ts sets it). */
export const SESSION_COOKIE = 'tgw_portal'

declare module 'fastify' {
  interface FastifyRequest {
    /** The portal session of a /portal/api call, once session-auth has found it. */
    portalSession: PortalSessionRow | null
  }
  interface FastifyContextConfig {
    /** The permission a portal API operation needs (checkPermission checks it). */
    permission?: PortalPermission
  }
}

/** The values of every cookie of the request named `name`, in the order the browser sent them. */
export function cookiesOf(request: FastifyRequest, name: string): string[] {
  const header = request.headers.cookie
  if (header === undefined) return []
  const values: string[] = []
  for (const part of header.split(';')) {
    const eq = part.indexOf('=')
    if (eq !== -1 && part.slice(0, eq).trim() === name) values.push(part.slice(eq + 1).trim())
  }
  return values
}

const TWO_COOKIES =
  'the request carries more than one portal session cookie (tgw_portal), one of which this portal did not set: clear the cookies of this site in your browser, then open a new portal link from your provider'

/** The session's credential and how it came; null when none did. */
function credentialOf(request: FastifyRequest): { secret: string; via: 'bearer' | 'cookie' } | null {
  const authorization = request.headers.authorization
  if (authorization !== undefined) {
    const match = /^Bearer +(\S+) *$/i.exec(authorization)
    if (match === null) throw new ApiError('unauthenticated', 'Authorization must be "Bearer <portal session token>"')
    return { secret: match[1]!, via: 'bearer' }
  }
  // Two are never the portal's own (one name, one path): another cookie beside it, planted by a
  // sibling host or an answer that is not the gateway's, and the first is not necessarily ours.
  const cookies = cookiesOf(request, SESSION_COOKIE)
  if (cookies.length > 1) throw new ApiError('unauthenticated', TWO_COOKIES)
  return cookies.length === 0 ? null : { secret: cookies[0]!, via: 'cookie' }
}

const ENDED =
  'the portal session has ended (it expired, was ended by your provider, or the account was deactivated): ask your provider for a new portal link'

/** Finds the request's open session, or throws 401 (none, malformed, ended) or 403 (a cross-site cookie). */
export function sessionAuth(lookups: PortalCredentialLookups) {
  return async (request: FastifyRequest): Promise<void> => {
    const credential = credentialOf(request)
    if (credential === null)
      throw new ApiError('unauthenticated', 'no portal session: open the portal link your provider gave you')
    if (!isWellFormedSessionSecret(credential.secret))
      throw new ApiError('unauthenticated', 'not a portal session token: open the portal link your provider gave you')
    // SameSite=Strict keeps the cookie off cross-site requests already; a browser that says where a
    // request comes from is held to the page's own origin too (defence in depth against CSRF).
    const site = request.headers['sec-fetch-site']
    if (credential.via === 'cookie' && site !== undefined && site !== 'same-origin' && site !== 'none')
      throw new ApiError('insufficient_scope', 'the portal session cookie is accepted from the portal page only')
    const session = await lookups.session(digest(credential.secret))
    if (session === null) throw new ApiError('unauthenticated', ENDED)
    request.portalSession = session
  }
}

/** The request's session (sessionAuth has found it). */
export const sessionOf = (request: FastifyRequest): PortalSessionRow => request.portalSession!

/** preHandler, just before the handler: 403 unless the session was given its operation's permission (its route's config). */
export async function checkPermission(request: FastifyRequest): Promise<void> {
  requirePermission(request, request.routeOptions.config.permission!)
}

/** 403 unless the session was given `permission`. */
export function requirePermission(request: FastifyRequest, permission: PortalPermission): void {
  const session = sessionOf(request)
  if (!session.permissions.includes(permission))
    throw new ApiError(
      'insufficient_scope',
      `this portal session does not have the ${permission} permission: ask your provider for a link that grants it`,
    )
}

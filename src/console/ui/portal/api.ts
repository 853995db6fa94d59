// The portal's API as its page calls it (docs/portal.md): same origin, under /portal/api, with the
// session's cookie, or, when the page is framed by the parent's site, with the session token the
// exchange answered, held in this module's memory only (never in storage). Its errors are the
// console's Problems, with advice for someone who holds a link, not a key. Once the API says the
// session has ended (401), the page is told and no further call is made.
import { adviseWith, ApiError, callJson, type Page, type Problem } from '../api.js'
import type { ApiKey, KeyPolicy, Limits, MintedKey, UsageEntry } from '../types.js'

export type Permission = 'keys:read' | 'keys:write' | 'usage:read' | 'requests:read'

/** `GET /portal/api/session`, as src/portal/exchange-routes.ts answers it. */
export interface PortalSession {
  id: string
  sub_account: { id: string; name: string; external_id: string | null }
  permissions: Permission[]
  expires_at: string
  return_url: string | null
  session_token?: string
  /** The exchange's answer only: the origins the link's parent lets embed the portal. */
  frame_ancestors?: string[]
  /** With keys:write: the sub-account's key policy, which the mint form shows and offers within. */
  key_policy?: KeyPolicy
}

/** `GET /portal/api/usage`. */
export interface PortalUsage {
  month: string
  used: number
  limits: Limits
  usage: UsageEntry | null
}

export type { ApiKey, MintedKey, Page }

/** Framed by another page (the parent's site): the session then lives in memory, as a bearer. */
export function isEmbedded(): boolean {
  try {
    return window.self !== window.top
  } catch {
    return true // a cross-origin top: reading it may throw in older browsers
  }
}

/**
 * The origins of the pages that frame this one, nearest first: the browser's own list, or, where
 * it has none (Firefox), the framing page's origin from the referrer when that page is the top.
 * Empty when it cannot tell: the gateway then gives no session (a page framed elsewhere never gets one).
 */
export function ancestorOrigins(): string[] {
  if ('ancestorOrigins' in location) return Array.from(location.ancestorOrigins)
  try {
    if (window.parent !== window.top || document.referrer === '') return []
    return [new URL(document.referrer).origin]
  } catch {
    return []
  }
}

/** Refused by the page itself: a framing origin the answer does not list (the gateway checked it too). */
const FRAMED_ELSEWHERE: Problem = {
  status: 403,
  code: 'insufficient_scope',
  title: 'Framed by another site',
  detail: 'this portal link may not be used in this site: open it in a window of its own',
}

let bearer: string | null = null
let ended: Problem | null = null
let onEnded: (problem: Problem) => void = () => {}

/** Told once, when the session ends (a 401, or its expiry passing): the page shows why. */
export function whenSessionEnds(listener: (problem: Problem) => void): void {
  onEnded = listener
}

/** The session is over: no more calls, and the page says so. */
export function endSession(problem: Problem): void {
  if (ended !== null) return
  ended = problem
  bearer = null
  onEnded(problem)
}

export const NO_LINK: Problem = {
  status: 401,
  code: 'unauthenticated',
  title: 'No portal session',
  detail: 'This page was opened without a portal link, or its session is no longer held by this page.',
}

adviseWith((p) => {
  switch (p.code) {
    case 'unauthenticated':
      return 'Ask your provider for a new link: a portal link works once, for a limited time.'
    case 'insufficient_scope':
      return 'Your portal link does not allow this: ask your provider for a link that does.'
    case 'not_found':
      return 'The key no longer exists, or is not one of this account: reload the list.'
    case 'validation_failed':
    case 'invalid_json':
      return 'Correct the values named below and try again.'
  }
  if (p.status === 401) return 'Ask your provider for a new link.'
  if (p.status === 403) return 'Your portal link does not allow this: ask your provider for a link that does.'
  return undefined
})

/** One call of the portal's API; `path` is below /portal/api. */
export async function portalApi<T>(method: string, path: string, body?: unknown): Promise<T> {
  if (ended !== null) throw new ApiError(ended)
  const headers: Record<string, string> = { accept: 'application/json' }
  if (bearer !== null) headers.authorization = `Bearer ${bearer}`
  if (body !== undefined) headers['content-type'] = 'application/json'
  // The cookie is sent only when no bearer is held: embedded, the page never uses one.
  const init: RequestInit = {
    method,
    headers,
    credentials: bearer === null ? 'same-origin' : 'omit',
    cache: 'no-store',
    redirect: 'error',
  }
  if (body !== undefined) init.body = JSON.stringify(body)
  return callJson<T>(`/portal/api${path}`, init, endSession)
}

/**
 * The session: the link's one-time token exchanged (a cookie, or a bearer kept here when
 * embedded), or, with no token (the page reloaded), the cookie's session if there is one.
 */
export async function openSession(token: string | null, embedded: boolean): Promise<PortalSession> {
  if (token === null) {
    // Embedded, the session was in the memory of the page that was reloaded: it is gone.
    if (embedded) throw new ApiError(NO_LINK)
    return portalApi<PortalSession>('GET', '/session')
  }
  const ancestors = embedded ? ancestorOrigins() : []
  const session = await portalApi<PortalSession>(
    'POST',
    '/session',
    embedded ? { token, embedded: true, ancestor_origins: ancestors } : { token },
  )
  const { session_token: held, frame_ancestors: allowed = [], ...shown } = session
  // The gateway gave a session for these ancestors only: a page that finds itself elsewhere drops it.
  if (embedded && !ancestors.every((origin) => allowed.includes(origin))) throw new ApiError(FRAMED_ELSEWHERE)
  if (held !== undefined) bearer = held
  return shown
}

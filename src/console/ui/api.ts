// The management API as the console calls it: same origin, the parent key from sessionStorage,
// every error turned into a Problem with advice on what to do about it.
const KEY = 'tgw.console.key'

export interface Problem {
  status: number
  code: string
  title: string
  detail: string
  errors?: { path: string; message: string }[]
  request_id?: string
  violated_policies?: string[]
}

export class ApiError extends Error {
  readonly problem: Problem
  readonly retryAfter: number | null
  constructor(problem: Problem, retryAfter: number | null = null) {
    super(problem.detail)
    this.problem = problem
    this.retryAfter = retryAfter
  }
}

export interface Page<T> {
  data: T[]
  next_cursor: string | null
}

export const session = {
  key: (): string | null => sessionStorage.getItem(KEY),
  signIn: (key: string) => sessionStorage.setItem(KEY, key),
  signOut: () => sessionStorage.removeItem(KEY),
}

/** Told when the API refuses the key (401): the console signs out and says why. */
let onRefused: (problem: Problem) => void = () => {}
export function whenKeyRefused(listener: (problem: Problem) => void): void {
  onRefused = listener
}

/**
 * A page's own advice, asked first (the portal's: its user has a link, not a key); undefined leaves
 * an error to the console's advice below.
 */
let ownAdvice: (p: Problem) => string | undefined = () => undefined
export function adviseWith(advise: (p: Problem) => string | undefined): void {
  ownAdvice = advise
}

/** What the user can do about an error, by its code and status (docs/api.md#errors). */
export function advice(p: Problem): string {
  const own = ownAdvice(p)
  if (own !== undefined) return own
  switch (p.code) {
    case 'unauthenticated':
    case 'key_expired':
      return 'The key was refused: sign in again with a valid parent key.'
    case 'insufficient_scope':
      return 'This key lacks a scope the console needs: sign in with a key holding sub_accounts:read and sub_accounts:write.'
    case 'parent_key_required':
      return "The console needs a parent account's key, not a sub-account's: sign in with one."
    case 'not_found':
      return 'It does not exist any more, or belongs to another account: go back to the list.'
    case 'route_not_found':
      return 'This gateway does not serve that API route (it may be an older version): ask its operator.'
    case 'external_id_conflict':
      return 'Another sub-account already has this external id: choose another one.'
    case 'limit_reached':
      return 'This account has as many webhook endpoints as the gateway allows: delete one it no longer needs first.'
    case 'url_conflict':
      return 'This account already has an endpoint with this URL: use that one, or delete it first.'
    case 'endpoint_disabled':
      return 'The endpoint is disabled (its receiver answered 410, or failed for 5 days): make a new one for it.'
    case 'plan_in_use':
      return 'Sub-accounts or the default plan still use this plan: give them another plan (or none) first.'
    case 'key_not_active':
      return 'Only an active key can be rolled: mint a new key instead.'
    case 'idempotency_key_in_flight':
      return 'The same change is still being made: wait a moment, then reload.'
    case 'idempotency_key_reused':
      return 'Try the change again.'
    case 'validation_failed':
    case 'invalid_json':
      return 'Correct the values named below and try again.'
    case 'idempotency_answer_lost':
      return 'The change was made but its answer was lost: find it in the audit log (a key or secret made so cannot be shown again: revoke or delete it and make another).'
    case 'tenant_deactivated':
      return "This parent account is deactivated: ask the gateway's operator to reactivate it."
    case 'acting_tenant_malformed':
    case 'acting_tenant_required':
    case 'acting_tenant_forbidden':
    case 'acting_tenant_deactivated':
      return "The gateway refused the console's acting tenant (it acts as the parent itself): ask the gateway's operator."
    case 'request_timeout':
      return 'The request took too long to reach the gateway: check the connection and try again.'
    case 'payload_too_large':
      return 'What you entered is too large: shorten it (metadata, description) and try again.'
    case 'ip_not_allowed':
      return 'This key may not be used from this address (its IP allow-list): sign in from an allowed address, or with a key that has no allow-list.'
    case 'service_worker_refused':
      return "The gateway serves no service worker's script through its routes (a worker there would control the console and the portal): load the page without one."
    case 'websocket_not_enabled':
      return 'That route does not carry WebSockets: see Routes for the ones that do, or ask the operator to set websocket: true on it.'
    case 'headers_too_large':
      return 'The request was too large for the gateway: check that the key pasted at sign-in is only the key, and sign in again.'
    case 'not_a_key':
      return 'Copy the whole key again, from where it was first shown, and paste it alone.'
    case 'credits_exhausted':
      return "That sub-account's prepaid credits are spent: grant it more credits (Credits), or take the credit limit off its limits or its plan."
    case 'signature_invalid':
      return "The report's signature did not verify: only GitHub's secret scanning sends these, signed."
    case 'scanner_keys_unavailable':
      return "The gateway could not fetch GitHub's secret scanning keys: try again in a moment, and ask the operator to check SECRET_SCANNING_KEYS_URL."
    case 'spool_unavailable':
      return 'The gateway could not write the import to its temporary directory (full or not writable): nothing was imported; try again later, and ask the operator to check TMPDIR.'
    case 'cors_refused':
      return "A page on another origin asked for what the route's cors does not allow: add its origin, method or headers to the route's cors, or call from an allowed origin."
    case 'cell_not_served':
      return "That route has no targets for the tenant's cell: place the sub-account in a cell the route serves, or ask the operator to add the cell to the route."
    case 'network':
      return 'Check that the gateway is running and reachable, then try again.'
  }
  // Every 429 (rate_limited, quota_exceeded, too_many_concurrent_requests) means the same here.
  if (p.status === 429) return 'Too many calls for now: wait a few seconds and try again.'
  if (p.status >= 500) return 'The gateway or its database is unavailable: try again in a moment.'
  if (p.status === 401) return 'The key was refused: sign in again.'
  if (p.status === 403) return 'This key may not do that: sign in with a parent key that may.'
  return 'Check what you entered and try again.'
}

export async function problemOf(response: Response): Promise<Problem> {
  const fallback: Problem = {
    status: response.status,
    code: `http_${response.status}`,
    title: response.statusText || `HTTP ${response.status}`,
    detail: `the gateway answered ${response.status} without a problem description`,
  }
  try {
    const body = (await response.json()) as Partial<Problem>
    if (typeof body.title !== 'string') return fallback
    return { ...fallback, ...body, detail: body.detail ?? '' }
  } catch {
    return fallback
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Calls the management API as the signed-in parent. A write is made once, even if retried. */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const key = session.key()
  const headers: Record<string, string> = { accept: 'application/json' }
  if (key !== null) headers.authorization = `Bearer ${key}`
  // The console manages as the parent itself; writes of a parent with sub-accounts must say so.
  headers['x-service-acting-tenant'] = 'self'
  if (method === 'POST' || method === 'PATCH') headers['idempotency-key'] = crypto.randomUUID()
  if (body !== undefined) headers['content-type'] = 'application/json'
  const init: RequestInit = { method, headers, credentials: 'omit', cache: 'no-store', redirect: 'error' }
  if (body !== undefined) init.body = JSON.stringify(body)
  return callJson<T>(`/v1/sub-accounts${path}`, init, onRefused)
}

/**
 * One call of a JSON API (the management API's, the portal's): its answer, or an ApiError holding
 * the problem. A read refused by the API's own rate (a 429 with a short Retry-After) waits its turn,
 * once or twice; a 401 is told to `onRefused` before it is thrown.
 */
export async function callJson<T>(url: string, init: RequestInit, onRefused: (problem: Problem) => void): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    let response: Response
    try {
      response = await fetch(url, init)
    } catch (err) {
      throw new ApiError({
        status: 0,
        code: 'network',
        title: 'The gateway did not answer',
        detail: err instanceof Error ? err.message : String(err),
      })
    }
    if (response.ok) return (response.status === 204 ? undefined : await response.json()) as T
    const retryAfter = Number(response.headers.get('retry-after') ?? 'NaN')
    const problem = await problemOf(response)
    // The management API's own rate (50 calls a second), which portal calls spend too.
    if (response.status === 429 && init.method === 'GET' && attempt < 2 && retryAfter <= 2) {
      await sleep(Math.max(retryAfter, 0.2) * 1000)
      continue
    }
    if (response.status === 401) onRefused(problem)
    throw new ApiError(problem, Number.isFinite(retryAfter) ? retryAfter : null)
  }
}

export function query(params: Record<string, string | number | null | undefined>): string {
  const search = new URLSearchParams()
  for (const [name, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== '') search.set(name, String(value))
  }
  const text = search.toString()
  return text === '' ? '' : `?${text}`
}

export function problemOfError(err: unknown): Problem {
  if (err instanceof ApiError) return err.problem
  return { status: 0, code: 'console_error', title: 'The console failed', detail: String(err) }
}

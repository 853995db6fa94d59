// A route's several targets and how they are balanced and watched (docs/configuration.md, routes:
// `targets`, `balance`, `outlier`, `health_check`). Apart from route-table.ts, as their rules are
// many; a route with `upstream` alone has none of this, and its requests take no balancer at all.

/** One target of a route: its URL (as route-table.ts's parseUpstream writes it) and its weight. */
export interface RouteTarget {
  readonly url: string
  /** 1 to 1000: its share of the route's requests against the other targets'. */
  readonly weight: number
}

/** Envoy's names: least_request (power of two choices), round_robin, and a hash of the tenant. */
export type Balance = 'least_request' | 'round_robin' | 'tenant_hash'

/** Passive health (outlier detection, as Envoy calls it). */
export interface OutlierOptions {
  /** Failures in a row (connect failure, reset, timeout, 502/503/504) that take a target out. */
  readonly ejectAfter: number
  /** At most this percent of the targets (rounded down) are out at once. */
  readonly maxEjectedPercent: number
}

/** Active health: a GET of `path` on every target, every `intervalMs` (jittered). */
export interface HealthCheckOptions {
  /** Sent as written to each target's origin (not under the base path). */
  readonly path: string
  readonly intervalMs: number
  /** A check with no answer's head within it fails. */
  readonly timeoutMs: number
  /** Checks passed in a row that put a failing target back. */
  readonly healthyAfter: number
  /** Checks failed in a row that take a target out. */
  readonly unhealthyAfter: number
  /** The statuses that pass; null: any 2xx. */
  readonly statuses: readonly number[] | null
}

export interface RouteTargets {
  /** 1 to 64, one scheme and one base path for all, none twice. */
  readonly targets: readonly RouteTarget[]
  readonly balance: Balance
  readonly outlier: OutlierOptions
  readonly healthCheck: HealthCheckOptions | null
}

export const TARGET_KEYS = ['targets', 'balance', 'outlier', 'health_check'] as const
export const MAX_TARGETS = 64
export const MAX_WEIGHT = 1000
export const DEFAULT_OUTLIER: OutlierOptions = Object.freeze({ ejectAfter: 5, maxEjectedPercent: 50 })
const BALANCES: readonly Balance[] = ['least_request', 'round_robin', 'tenant_hash']
const OUTLIER_KEYS = new Set(['eject_after', 'max_ejected_percent'])
const HEALTH_KEYS = new Set(['path', 'interval_ms', 'timeout_ms', 'healthy_after', 'unhealthy_after', 'statuses'])
const TARGET_ENTRY_KEYS = new Set(['url', 'weight'])
// A path and query of visible ASCII: what a check sends must not be able to break its request line.
const CHECK_PATH = /^\/[\x21-\x7e]*$/

type Fail = (problem: string) => never
/** route-table.ts's URL rules, the message naming `field`. */
type ParseUrl = (value: unknown, field: string) => string

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function unknownKeys(field: string, value: Record<string, unknown>, allowed: Set<string>, fail: Fail): void {
  for (const key of Object.keys(value))
    if (!allowed.has(key)) fail(`${field}: unknown key "${key}" (allowed: ${[...allowed].join(', ')})`)
}

function wholeNumber(field: string, value: unknown, fallback: number, min: number, max: number, fail: Fail): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max)
    fail(`${field} must be a whole number from ${min} to ${max}`)
  return value
}

function parseTargets(value: unknown, parseUrl: ParseUrl, fail: Fail): RouteTarget[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_TARGETS)
    fail(`targets must be a list of 1 to ${MAX_TARGETS} mappings with url and weight`)
  const targets: RouteTarget[] = []
  value.forEach((entry: unknown, index) => {
    const field = `targets[${index}]`
    if (!isMapping(entry)) fail(`${field} must be a mapping with url and weight`)
    unknownKeys(field, entry, TARGET_ENTRY_KEYS, fail)
    const url = parseUrl(entry.url, `${field}.url`)
    if (targets.some((target) => target.url === url)) fail(`${field}.url names a target already listed`)
    targets.push(Object.freeze({ url, weight: wholeNumber(`${field}.weight`, entry.weight, 1, 1, MAX_WEIGHT, fail) }))
  })
  // One scheme and base path: the path rewrite, the answers' Location and the WebSocket URL are
  // the route's, whichever target serves the request.
  const first = new URL(targets[0]!.url)
  targets.forEach((target, index) => {
    const url = new URL(target.url)
    if (url.protocol !== first.protocol || url.pathname !== first.pathname)
      fail(
        `targets[${index}].url must have the scheme and base path of targets[0] (${first.protocol}//…${first.pathname})`,
      )
  })
  return targets
}

function parseOutlier(value: unknown, fail: Fail): OutlierOptions {
  if (value === undefined) return DEFAULT_OUTLIER
  if (!isMapping(value)) fail('outlier must be a mapping with eject_after and max_ejected_percent')
  unknownKeys('outlier', value, OUTLIER_KEYS, fail)
  return Object.freeze({
    ejectAfter: wholeNumber('outlier.eject_after', value.eject_after, DEFAULT_OUTLIER.ejectAfter, 1, 1000, fail),
    maxEjectedPercent: wholeNumber(
      'outlier.max_ejected_percent',
      value.max_ejected_percent,
      DEFAULT_OUTLIER.maxEjectedPercent,
      0,
      100,
      fail,
    ),
  })
}

function parseHealthCheck(value: unknown, fail: Fail): HealthCheckOptions | null {
  if (value === undefined) return null
  if (!isMapping(value)) fail('health_check must be a mapping with path and interval_ms')
  unknownKeys('health_check', value, HEALTH_KEYS, fail)
  if (typeof value.path !== 'string' || !CHECK_PATH.test(value.path))
    fail('health_check.path must be a path starting with / of visible ASCII characters, such as /healthz')
  const intervalMs = wholeNumber('health_check.interval_ms', value.interval_ms, 10_000, 1000, 3_600_000, fail)
  const timeoutMs = wholeNumber(
    'health_check.timeout_ms',
    value.timeout_ms,
    Math.min(2000, intervalMs),
    1,
    intervalMs,
    fail,
  )
  let statuses: number[] | null = null
  if (value.statuses !== undefined) {
    const list = value.statuses
    if (
      !Array.isArray(list) ||
      list.length === 0 ||
      list.some((status) => !Number.isSafeInteger(status) || (status as number) < 200 || (status as number) > 599)
    )
      fail('health_check.statuses must be a list of HTTP statuses from 200 to 599')
    statuses = list as number[]
  }
  return Object.freeze({
    path: value.path,
    intervalMs,
    timeoutMs,
    healthyAfter: wholeNumber('health_check.healthy_after', value.healthy_after, 2, 1, 100, fail),
    unhealthyAfter: wholeNumber('health_check.unhealthy_after', value.unhealthy_after, 3, 1, 100, fail),
    statuses,
  })
}

/**
 * A route's `targets` and their options; null for a route with `upstream` (one target, no
 * balancer). `fail` throws route-table.ts's one-line error naming the route. `isPublic`: a public
 * route has no tenant to hash.
 */
export function parseRouteTargets(
  entry: Readonly<Record<string, unknown>>,
  isPublic: boolean,
  parseUrl: ParseUrl,
  fail: Fail,
): RouteTargets | null {
  if (entry.targets === undefined) {
    for (const key of ['balance', 'outlier', 'health_check'])
      if (entry[key] !== undefined) fail(`${key} needs targets (a route with one upstream has nothing to balance)`)
    return null
  }
  if (entry.upstream !== undefined) fail('give either upstream (one URL) or targets (a list), not both')
  const targets = parseTargets(entry.targets, parseUrl, fail)
  const balance = entry.balance ?? 'least_request'
  if (!BALANCES.includes(balance as Balance)) fail(`balance must be one of ${BALANCES.join(', ')}`)
  if (balance === 'tenant_hash' && isPublic)
    fail('balance tenant_hash needs a keyed route (a public route has no tenant)')
  return Object.freeze({
    targets: Object.freeze(targets),
    balance: balance as Balance,
    outlier: parseOutlier(entry.outlier, fail),
    healthCheck: parseHealthCheck(entry.health_check, fail),
  })
}

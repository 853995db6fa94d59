// A route's limits (docs/configuration.md, routes): its timeouts, body size and connections, each
// inherited from the top level when the route does not set it, and its shares of the connections
// per tenant and per account. Apart from route-table.ts, as their defaults and rules are many.
import { defaultPerAccount, defaultPerTenant } from './concurrency.js'
import type { ProxyRoute } from './route.js'

export const DEFAULT_TIMEOUT_MS = 30_000
export const DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
export const DEFAULT_MAX_CONNECTIONS = 256
export const DEFAULT_BODY_IDLE_TIMEOUT_MS = 10_000
export const DEFAULT_RESPONSE_IDLE_TIMEOUT_MS = 30_000

/** Options a route inherits from the top level when it does not set them. */
export const INHERITED_KEYS = [
  'timeout_ms',
  'max_body_bytes',
  'max_connections',
  'body_idle_timeout_ms',
  'response_idle_timeout_ms',
] as const
export const SHARE_KEYS = ['max_connections_per_tenant', 'max_connections_per_account'] as const

export type RouteLimits = Pick<
  ProxyRoute,
  'timeoutMs' | 'maxBodyBytes' | 'maxConnections' | 'bodyIdleTimeoutMs' | 'responseIdleTimeoutMs'
>

/** The limits of the top level when it sets none. */
export const DEFAULT_LIMITS: RouteLimits = {
  timeoutMs: DEFAULT_TIMEOUT_MS,
  maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
  maxConnections: DEFAULT_MAX_CONNECTIONS,
  bodyIdleTimeoutMs: DEFAULT_BODY_IDLE_TIMEOUT_MS,
  responseIdleTimeoutMs: DEFAULT_RESPONSE_IDLE_TIMEOUT_MS,
}

/** `fail` throws the route table's one-line error (it names the route, or the top level). */
type Fail = (problem: string) => never

function positiveInteger(key: string, value: unknown, fallback: number, fail: Fail): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    fail(`${key} must be a positive whole number`)
  }
  return value
}

/** The time, size and connection limits of a route (or of the top level), each defaulting to `fallback`'s. */
export function parseRouteLimits(
  value: Readonly<Record<string, unknown>>,
  fallback: RouteLimits,
  fail: Fail,
): RouteLimits {
  return {
    timeoutMs: positiveInteger('timeout_ms', value.timeout_ms, fallback.timeoutMs, fail),
    maxBodyBytes: positiveInteger('max_body_bytes', value.max_body_bytes, fallback.maxBodyBytes, fail),
    maxConnections: positiveInteger('max_connections', value.max_connections, fallback.maxConnections, fail),
    bodyIdleTimeoutMs: positiveInteger(
      'body_idle_timeout_ms',
      value.body_idle_timeout_ms,
      fallback.bodyIdleTimeoutMs,
      fail,
    ),
    responseIdleTimeoutMs: positiveInteger(
      'response_idle_timeout_ms',
      value.response_idle_timeout_ms,
      fallback.responseIdleTimeoutMs,
      fail,
    ),
  }
}

/**
 * A route's shares of its connections: per resolved tenant and per parent account. The account's
 * holds the tenant's: set both, and a tenant share above the account's is a mistake to fix; set
 * the tenant's alone, and the account's default (half) still bounds a parent's sub-accounts.
 */
export function parseShareLimits(
  entry: Readonly<Record<string, unknown>>,
  maxConnections: number,
  fail: Fail,
): Pick<ProxyRoute, 'maxConnectionsPerTenant' | 'maxConnectionsPerAccount'> {
  const share = (key: string, fallback: number) => {
    const limit = positiveInteger(key, entry[key], fallback, fail)
    if (limit > maxConnections) fail(`${key} may not exceed max_connections`)
    return limit
  }
  const perTenant = share('max_connections_per_tenant', defaultPerTenant(maxConnections))
  const perAccount = share('max_connections_per_account', defaultPerAccount(maxConnections))
  if (entry.max_connections_per_account !== undefined && perTenant > perAccount)
    fail('max_connections_per_tenant may not exceed max_connections_per_account (a tenant is part of its account)')
  return { maxConnectionsPerTenant: perTenant, maxConnectionsPerAccount: perAccount }
}

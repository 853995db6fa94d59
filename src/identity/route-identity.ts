// A route's `identity` option (docs/configuration.md, docs/credentials.md): the upstream also gets
// the request's identity as a signed assertion, for this audience and lifetime.

export interface RouteIdentity {
  /** `aud` of the assertions: the upstream's own name for itself. */
  readonly audience: string
  /** Lifetime of an assertion: `exp` - `iat`. */
  readonly ttlSeconds: number
}

export const DEFAULT_IDENTITY_TTL_SECONDS = 60
export const MIN_IDENTITY_TTL_SECONDS = 10
export const MAX_IDENTITY_TTL_SECONDS = 300

const IDENTITY_KEYS = new Set(['audience', 'ttl_seconds'])

/** Checks `identity`; `fail` throws the route table's one-line error (it names the route). */
export function parseRouteIdentity(value: unknown, fail: (problem: string) => never): RouteIdentity | null {
  if (value === undefined) return null
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    fail('identity must be a mapping with audience and, optionally, ttl_seconds')
  const option = value as Record<string, unknown>
  for (const key of Object.keys(option)) {
    if (!IDENTITY_KEYS.has(key)) fail(`identity: unknown key "${key}" (allowed: ${[...IDENTITY_KEYS].join(', ')})`)
  }
  const { audience, ttl_seconds: given } = option
  if (typeof audience !== 'string' || audience.trim() === '')
    fail('identity.audience must be a non-empty string: the name the upstream knows itself by')
  const ttl = given === undefined ? DEFAULT_IDENTITY_TTL_SECONDS : given
  if (
    !Number.isInteger(ttl) ||
    (ttl as number) < MIN_IDENTITY_TTL_SECONDS ||
    (ttl as number) > MAX_IDENTITY_TTL_SECONDS
  )
    fail(`identity.ttl_seconds must be a whole number from ${MIN_IDENTITY_TTL_SECONDS} to ${MAX_IDENTITY_TTL_SECONDS}`)
  return Object.freeze({ audience, ttlSeconds: ttl as number })
}

// A tenant's limits as the API shows them and the store keeps them (docs/api.md, Limits and
// quotas), their bounds, and the plain checks the CLI uses where the API uses the TypeBox schema
// (management/schemas.ts, built from the same bounds).

export type RateLimit = {
  /** N: requests per window, and the bucket's capacity. */
  readonly requests: number
  /** W, in seconds. */
  readonly per_seconds: number
}

export type MonthlyQuota = {
  /** M: requests per UTC calendar month. */
  readonly requests: number
}

/** What `limits` holds; a member that is null sets no limit of its kind. (Types, not interfaces: postgres.js takes them as JSON.) */
export type TenantLimits = {
  readonly rate: RateLimit | null
  readonly monthly_quota: MonthlyQuota | null
}

export const LIMIT_BOUNDS = {
  /** N and M: 1 to 10^9. */
  requests: { minimum: 1, maximum: 1_000_000_000 },
  /** W: 1 s to an hour. */
  perSeconds: { minimum: 1, maximum: 3_600 },
} as const

export const NO_LIMITS: TenantLimits = { rate: null, monthly_quota: null }

/** The stored form: null when no member sets a limit, so that "no limits" has one spelling. */
export function storedLimits(limits: TenantLimits | null): TenantLimits | null {
  if (limits === null || (limits.rate === null && limits.monthly_quota === null)) return null
  return {
    rate: limits.rate && { requests: limits.rate.requests, per_seconds: limits.rate.per_seconds },
    monthly_quota: limits.monthly_quota && { requests: limits.monthly_quota.requests },
  }
}

/** A body's `limits` as a whole object: a member left out is null (docs/api.md). */
export function limitsFromBody(
  body: { rate?: RateLimit | null; monthly_quota?: MonthlyQuota | null } | null,
): TenantLimits | null {
  if (body === null) return null
  return storedLimits({ rate: body.rate ?? null, monthly_quota: body.monthly_quota ?? null })
}

/** The API's form of stored limits: both members always present. */
export function shownLimits(limits: TenantLimits | null | undefined): TenantLimits {
  return limits ?? NO_LIMITS
}

const within = (value: number, bounds: { minimum: number; maximum: number }) =>
  Number.isSafeInteger(value) && value >= bounds.minimum && value <= bounds.maximum

/** Thrown by the CLI's parsers; the message names the flag and the bounds. */
export class LimitValueError extends Error {
  override name = 'LimitValueError'
}

/**
 * `--rate N/Ws` (`100/1s`; the `s` may be left out). Digits only: no sign, no exponent, no
 * fraction, so that what the operator typed is exactly what is stored.
 */
export function parseRate(text: string): RateLimit {
  const match = /^(\d{1,10})\/(\d{1,5})s?$/.exec(text.trim())
  const { requests, perSeconds } = LIMIT_BOUNDS
  const message = `--rate must be N/Ws with 1 <= N <= ${requests.maximum} and 1 <= W <= ${perSeconds.maximum} (e.g. 100/1s)`
  if (match === null) throw new LimitValueError(message)
  const rate = { requests: Number(match[1]), per_seconds: Number(match[2]) }
  if (!within(rate.requests, requests) || !within(rate.per_seconds, perSeconds)) throw new LimitValueError(message)
  return rate
}

/** `--monthly-quota M`. */
export function parseMonthlyQuota(text: string): MonthlyQuota {
  const { requests } = LIMIT_BOUNDS
  const message = `--monthly-quota must be a whole number from 1 to ${requests.maximum}`
  if (!/^\d{1,10}$/.test(text.trim())) throw new LimitValueError(message)
  const quota = { requests: Number(text.trim()) }
  if (!within(quota.requests, requests)) throw new LimitValueError(message)
  return quota
}

// A tenant's limits as the API shows them and the store keeps them (docs/api.md, Limits and
// quotas), their bounds, and the plain checks the CLI uses where the API uses the TypeBox schema
// (schemas/limits.ts, built from the same bounds).

export type RateLimit = {
  /** N: requests per window, and the bucket's capacity. */
  readonly requests: number
  /** W, in seconds. */
  readonly per_seconds: number
}

export type MonthlyQuota = {
  /** M: requests per UTC calendar month. */
  readonly requests: number
  /**
   * The shares of M, in %, at which `usage.threshold_reached` is written (docs/events.md, Alerts);
   * absent: 80 and 100.
   */
  readonly alert_thresholds?: number[]
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
    monthly_quota: limits.monthly_quota && storedQuota(limits.monthly_quota),
  }
}

/** A quota as kept: its thresholds, when given, in order and once each. */
function storedQuota(quota: MonthlyQuota): MonthlyQuota {
  const thresholds = quota.alert_thresholds
  return thresholds === undefined
    ? { requests: quota.requests }
    : { requests: quota.requests, alert_thresholds: [...new Set(thresholds)].sort((a, b) => a - b) }
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

/** `--quota-alerts 50,80,100`: 1 to 5 shares of the quota, in %, each 1 to 100. */
export function parseAlertThresholds(text: string): number[] {
  const message = '--quota-alerts must be 1 to 5 whole percentages from 1 to 100, separated by commas (e.g. 50,80,100)'
  const parts = text.split(',').map((part) => part.trim())
  if (parts.length > 5 || parts.some((part) => !/^\d{1,3}$/.test(part))) throw new LimitValueError(message)
  const thresholds = parts.map(Number)
  if (thresholds.some((percent) => percent < 1 || percent > 100)) throw new LimitValueError(message)
  return thresholds
}

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

/** A meter's rate: at most `units` per `per_seconds` seconds, as a token bucket of units. */
export type MeterRate = {
  readonly units: number
  readonly per_seconds: number
}

/** A meter's monthly quota: at most `units` per UTC calendar month. */
export type MeterQuota = {
  readonly units: number
  readonly alert_thresholds?: number[]
}

/** The limits of one meter the upstream reports (docs/api.md, Limits in units). */
export type MeterLimits = {
  readonly rate: MeterRate | null
  readonly monthly_quota: MeterQuota | null
}

/**
 * A prepaid credit of one meter (docs/api.md, Credits): with `required`, a request under it passes
 * while the meter's balance of grants is above zero. `low_threshold_percent`: the share (%) of the
 * units granted by its live grants below which the balance is low (credits.low); kept filled in.
 */
export type CreditLimit = {
  readonly required: true
  readonly low_threshold_percent: number
}

/** `low_threshold_percent` when a body gives none. */
export const DEFAULT_LOW_THRESHOLD_PERCENT = 10

/**
 * What `limits` holds; a member that is null sets no limit of its kind. `meters` and `credits`, by
 * meter name, are present only when they set one. (Types, not interfaces: postgres.js takes them
 * as JSON.)
 */
export type TenantLimits = {
  readonly rate: RateLimit | null
  readonly monthly_quota: MonthlyQuota | null
  readonly meters?: { readonly [meter: string]: MeterLimits }
  /** A sub-account's prepaid credits, by meter name (never in `shadow`, nor on a parent account). */
  readonly credits?: { readonly [meter: string]: CreditLimit }
  /**
   * Limits of the same shape, counted as enforced ones are and never refusing (docs/api.md, Shadow
   * limits): present only when one is set.
   */
  readonly shadow?: ShadowLimits
}

/** A tenant's shadow limits: the limits' shape, without a shadow of their own. */
export type ShadowLimits = Omit<TenantLimits, 'shadow' | 'credits'>

/** A meter's name: the usage report's and the export's key. `requests` is the cost's own meter. */
export const METER_NAME = /^[a-z][a-z0-9_]{0,31}$/

export const LIMIT_BOUNDS = {
  /** N and M: 1 to 10^9. */
  requests: { minimum: 1, maximum: 1_000_000_000 },
  /** W: 1 s to an hour. */
  perSeconds: { minimum: 1, maximum: 3_600 },
  /** A meter's N and M: 1 to 10^12 units, what one answer may report at most. */
  units: { minimum: 1, maximum: 1_000_000_000_000 },
  /** Meters with limits on one tenant. */
  meters: 16,
} as const

export const NO_LIMITS: TenantLimits = { rate: null, monthly_quota: null }

/**
 * The stored form: null when no member sets a limit, so that "no limits" has one spelling; a
 * meter without a limit left out, and `meters` with it when none is left, in name order.
 */
export function storedLimits(limits: TenantLimits | null): TenantLimits | null {
  if (limits === null) return null
  const shadow = limits.shadow === undefined ? null : storedLimits({ ...limits.shadow, shadow: undefined })
  const meters: Record<string, MeterLimits> = {}
  for (const name of Object.keys(limits.meters ?? {}).sort()) {
    const meter = limits.meters![name]!
    if (meter.rate === null && meter.monthly_quota === null) continue
    meters[name] = {
      rate: meter.rate && { units: meter.rate.units, per_seconds: meter.rate.per_seconds },
      monthly_quota: meter.monthly_quota && {
        units: meter.monthly_quota.units,
        ...storedThresholds(meter.monthly_quota.alert_thresholds),
      },
    }
  }
  const metered = Object.keys(meters).length > 0
  const credits = storedCredits(limits.credits)
  if (limits.rate === null && limits.monthly_quota === null && !metered && shadow === null && credits === null)
    return null
  return {
    rate: limits.rate && { requests: limits.rate.requests, per_seconds: limits.rate.per_seconds },
    monthly_quota: limits.monthly_quota && {
      requests: limits.monthly_quota.requests,
      ...storedThresholds(limits.monthly_quota.alert_thresholds),
    },
    ...(metered ? { meters } : {}),
    ...(credits === null ? {} : { credits }),
    ...(shadow === null ? {} : { shadow }),
  }
}

/**
 * The credits in force for a sub-account whose own are `own` under a plan whose credits are `plan`
 * (docs/api.md, Credits): meter by meter, its own where it sets that meter's, else the plan's; in
 * name order, null when neither sets one. Each meter's credit is a kind of its own, as each
 * meter's rate and quota are.
 */
export function creditsInForce(
  own: TenantLimits['credits'] | undefined,
  plan: TenantLimits['credits'] | undefined,
): TenantLimits['credits'] | null {
  return storedCredits({ ...plan, ...own })
}

/** Credits as kept: in name order, the threshold filled in; null when none is set. */
function storedCredits(credits: TenantLimits['credits']): TenantLimits['credits'] | null {
  const names = Object.keys(credits ?? {}).sort()
  if (names.length === 0) return null
  const kept: Record<string, CreditLimit> = {}
  for (const name of names)
    kept[name] = {
      required: true,
      low_threshold_percent: credits![name]!.low_threshold_percent ?? DEFAULT_LOW_THRESHOLD_PERCENT,
    }
  return kept
}

/** A quota's thresholds as kept, when given: in order and once each. */
function storedThresholds(thresholds: number[] | undefined): { alert_thresholds?: number[] } {
  return thresholds === undefined ? {} : { alert_thresholds: [...new Set(thresholds)].sort((a, b) => a - b) }
}

/** A meter's limits as a body sends them: a member left out is null. */
type MeterLimitsBody = { rate?: MeterRate | null; monthly_quota?: MeterQuota | null }

type LimitsBody = {
  rate?: RateLimit | null
  monthly_quota?: MonthlyQuota | null
  meters?: { [meter: string]: MeterLimitsBody }
}

/** A credit as a body sends it: the threshold may be left out (DEFAULT_LOW_THRESHOLD_PERCENT). */
type CreditBody = { required: true; low_threshold_percent?: number }

/** A body's `limits` as a whole object: a member left out is null, `shadow` included (docs/api.md). */
export function limitsFromBody(
  body: (LimitsBody & { shadow?: LimitsBody | null; credits?: { [meter: string]: CreditBody } }) | null,
): TenantLimits | null {
  if (body === null) return null
  const shadow = body.shadow == null ? undefined : membersOf(body.shadow)
  const credits: Record<string, CreditLimit> = {}
  for (const [name, credit] of Object.entries(body.credits ?? {}))
    credits[name] = {
      required: true,
      low_threshold_percent: credit.low_threshold_percent ?? DEFAULT_LOW_THRESHOLD_PERCENT,
    }
  return storedLimits({ ...membersOf(body), credits, ...(shadow === undefined ? {} : { shadow }) })
}

function membersOf(body: LimitsBody): ShadowLimits {
  const meters: Record<string, MeterLimits> = {}
  for (const [name, meter] of Object.entries(body.meters ?? {}))
    meters[name] = { rate: meter.rate ?? null, monthly_quota: meter.monthly_quota ?? null }
  return { rate: body.rate ?? null, monthly_quota: body.monthly_quota ?? null, meters }
}

/**
 * Why a body's `limits.meters` cannot be kept, beyond what its schema checks, or null: a name the
 * usage report could not hold, `requests` (the cost's own meter), or too many meters. `meter`:
 * the name at fault (null: the whole member).
 */
export function meterLimitsProblem(
  meters: { [meter: string]: unknown } | undefined,
): { meter: string | null; message: string } | null {
  const names = Object.keys(meters ?? {})
  if (names.length > LIMIT_BOUNDS.meters)
    return { meter: null, message: `may name at most ${LIMIT_BOUNDS.meters} meters (${names.length} given)` }
  for (const meter of names) {
    if (meter === 'requests')
      return {
        meter,
        message: "`requests` is the cost's own meter: limit it with limits.rate and limits.monthly_quota",
      }
    if (!METER_NAME.test(meter))
      return {
        meter,
        message: `is not a meter's name: it must match ${METER_NAME.source} (a lower-case letter, then up to 31 of a-z 0-9 _)`,
      }
  }
  return null
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

/** `--rate N/Ws` of a meter (`--meter`): N units, from 1 to 10^12. */
export function parseMeterRate(text: string): MeterRate {
  const match = /^(\d{1,13})\/(\d{1,5})s?$/.exec(text.trim())
  const { units, perSeconds } = LIMIT_BOUNDS
  const message = `--rate of a meter must be N/Ws with 1 <= N <= ${units.maximum} units and 1 <= W <= ${perSeconds.maximum} (e.g. 100000/60s)`
  if (match === null) throw new LimitValueError(message)
  const rate = { units: Number(match[1]), per_seconds: Number(match[2]) }
  if (!within(rate.units, units) || !within(rate.per_seconds, perSeconds)) throw new LimitValueError(message)
  return rate
}

/** `--monthly-quota M`: requests, or a meter's units (`--meter`). */
export function parseMonthlyQuota(text: string): MonthlyQuota {
  const { requests } = LIMIT_BOUNDS
  const message = `--monthly-quota must be a whole number from 1 to ${requests.maximum}`
  if (!/^\d{1,10}$/.test(text.trim())) throw new LimitValueError(message)
  const quota = { requests: Number(text.trim()) }
  if (!within(quota.requests, requests)) throw new LimitValueError(message)
  return quota
}

/** `--monthly-quota M` of a meter (`--meter`): units, from 1 to 10^12. */
export function parseMeterQuota(text: string): MeterQuota {
  const { units } = LIMIT_BOUNDS
  const message = `--monthly-quota of a meter must be a whole number of units from 1 to ${units.maximum}`
  if (!/^\d{1,13}$/.test(text.trim())) throw new LimitValueError(message)
  const quota = { units: Number(text.trim()) }
  if (!within(quota.units, units)) throw new LimitValueError(message)
  return quota
}

/** `--meter NAME`: a meter's name, never `requests` (the cost's own: give no --meter for it). */
export function parseMeterName(text: string): string {
  const name = text.trim()
  if (name === 'requests')
    throw new LimitValueError('--meter requests: requests are limited without --meter (--rate, --monthly-quota)')
  if (!METER_NAME.test(name))
    throw new LimitValueError(
      `--meter must match ${METER_NAME.source} (a lower-case letter, then up to 31 of a-z 0-9 _)`,
    )
  return name
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

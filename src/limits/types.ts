// What the limiter decides about a request and what it reports for the RateLimit headers
// (docs/internals.md, limits). The proxy builds the subjects; the limiter never reads the store.
import type { Rate } from './bucket.js'

export type { Rate } from './bucket.js'

export interface Limits {
  rate: Rate | null
  /** `alertThresholds`: its own shares (%) for usage.threshold_reached; absent: the defaults. */
  monthlyQuota: { requests: number; alertThresholds?: readonly number[] } | null
  /**
   * Limits in the units a route meter reports, in name order (empty: none). N and M count units;
   * a request passes while the balance is above zero, and is charged when its answer ends.
   */
  meters?: readonly MeterLimit[]
  /** Shadow limits: counted as these are, never refusing (docs/api.md, Shadow limits). */
  shadow?: Limits
  /** A sub-account's required prepaid credits, in meter name order (absent: none). */
  credits?: readonly CreditBalance[]
}

/**
 * A meter's credits as a replica knows them (docs/api.md, Credits): what its grants give, as a
 * schedule of expiries, so that a grant's rest is gone at its expiry on every replica, to the
 * second, without a word from the store. The balance is what they give less what use burned
 * (counted as a quota's use is: credit-limit.ts).
 */
export interface CreditBalance {
  meter: string
  /** What the grants that no longer count (voided, expired when read) gave: the units burned from them. */
  settled: number
  /** The grants that counted when read: `units`, `left` then, and `expiresAt` (ms; null: never). */
  live: readonly { units: number; left: number; expiresAt: number | null }[]
  lowThresholdPercent: number
}

export interface MeterLimit {
  meter: string
  rate: Rate | null
  monthlyQuota: { requests: number; alertThresholds?: readonly number[] } | null
}

export type PolicyName =
  | 'sub_account.rate'
  | 'sub_account.monthly_quota'
  | 'account.rate'
  | 'account.monthly_quota'
  /** A parent's rate on the management API (MANAGEMENT_RATE). */
  | 'management.rate'
  | `${'sub_account' | 'account'}.meters.${string}.${'rate' | 'monthly_quota'}`
  | `${'sub_account' | 'account'}.shadow.${'rate' | 'monthly_quota'}`
  | `${'sub_account' | 'account'}.shadow.meters.${string}.${'rate' | 'monthly_quota'}`
  | `sub_account.credits.${string}`

export type Level = 'sub_account' | 'account' | 'management'

/** One tenant whose limits apply to a request: the sub-account it acts as, and/or the parent account. */
export interface LimitSubject {
  tenantId: string
  level: Level
  limits: Limits
}

export interface PolicyState {
  name: PolicyName
  /** N of a rate, M of a quota. */
  quota: number
  /** W of a rate; the current month's length in seconds for a quota. */
  windowSeconds: number
  /** What this replica believes is left: approximate across replicas, never more than one lease above. */
  remaining: number
  resetSeconds: number
}

export interface Decision {
  allowed: boolean
  /** Refused: every policy that refused it, in the order sub_account.rate, sub_account.monthly_quota, account.rate, account.monthly_quota. */
  violated: PolicyName[]
  /** Refused: whole seconds >= 1 until it would pass (rate) or until the next UTC month (quota). */
  retryAfterSeconds: number
  /** Every policy that applies, in that order, for the RateLimit-Policy / RateLimit headers. */
  policies: PolicyState[]
  /**
   * Admitted, and refused by these shadow limits had they been enforced (in the policies' order);
   * absent when none would have.
   */
  wouldRefuse?: PolicyName[]
  /** The shadow limits that took nothing of it (would refuse, or not decided yet): a refund skips them. */
  untaken?: PolicyName[]
  /**
   * Refused because a limit had no first answer within the wait (Redis or Postgres too slow): not
   * known to be over, so not a 429 (limits/answer.ts).
   */
  undecided?: true
}

/** Counters the limiter feeds; every member is optional (a Tally fits `{ inc() }`). */
export interface LimiterMetrics {
  /** Lease calls sent to Redis. */
  leaseRequests?: { inc(): void }
  /** Lease calls that failed or timed out. */
  leaseFailures?: { inc(): void }
  /** Units Redis granted to this replica's leases. */
  unitsTaken?: { inc(n: number): void }
  /** Units this replica gave back unused (or refunded). */
  unitsReturned?: { inc(n: number): void }
  /** Called whenever `degraded` changes (the tgw_limits_degraded gauge). */
  degraded?(value: boolean): void
}

/** Where a quota's month of use is read from when Redis has lost it: Postgres. */
export type LoadMonthUse = (
  subject: { tenantId: string; level: Level; meter: string },
  month: string,
) => Promise<number>

/** A monthly quota as one replica holds it, and the month's use as it last knew it. */
export interface QuotaUse {
  tenantId: string
  level: Level
  /** `requests` (the cost's meter), or a route meter's name. */
  meter: string
  /** A shadow quota's use (docs/api.md, Shadow limits): its alerts say so. */
  shadow?: true
  /** M. */
  requests: number
  /** `YYYY-MM`, UTC. */
  month: string
  used: number
  /** The quota's own alert thresholds (%); null: the defaults. */
  alertThresholds: readonly number[] | null
}

/** The units an upstream reported for one answer, by meter: all a limit asks of them (a Map is one). */
export interface ReportedUnits {
  get(meter: string): number | undefined
}

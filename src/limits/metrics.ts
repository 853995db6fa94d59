// The limits' metrics (docs/operations.md): decisions by policy and outcome fed as plain numbers
// on the request path, and the lease calls' work, which is background.
import { Counter, Gauge, type Registry } from 'prom-client'
import { type LatencySeries, talliedCounter, tally, type Tally } from '../shared/fast-metrics.js'
import type { PolicyName } from './types.js'

export const LIMIT_POLICIES = [
  'sub_account.rate',
  'sub_account.monthly_quota',
  'account.rate',
  'account.monthly_quota',
  'management.rate',
  // A route meter's limits, by level and kind: not by meter, so that the series are fixed.
  'sub_account.meters.rate',
  'sub_account.meters.monthly_quota',
  'account.meters.rate',
  'account.meters.monthly_quota',
] as const

/** The `policy` labels of tgw_limit_shadow_refusals_total: a shadow limit's level and kind (meters apart, not by meter). */
export const SHADOW_POLICIES = [
  'sub_account.shadow.rate',
  'sub_account.shadow.monthly_quota',
  'account.shadow.rate',
  'account.shadow.monthly_quota',
  'sub_account.shadow.meters.rate',
  'sub_account.shadow.meters.monthly_quota',
  'account.shadow.meters.rate',
  'account.shadow.meters.monthly_quota',
] as const

/** The label a shadow limit's would-be refusal counts under. */
export function shadowLabelIndex(name: PolicyName): number {
  const level = name.startsWith('account.') ? 'account' : 'sub_account'
  const kind = name.endsWith('.rate') ? 'rate' : 'monthly_quota'
  const meters = name.includes('.meters.') ? 'meters.' : ''
  return SHADOW_POLICIES.indexOf(`${level}.shadow.${meters}${kind}`)
}

/** The `policy` label a decision of this policy counts under: its own, or its meter's level and kind. */
export function policyLabelIndex(name: PolicyName): number {
  const own = (LIMIT_POLICIES as readonly string[]).indexOf(name)
  if (own >= 0) return own
  const level = name.startsWith('account.') ? 'account' : 'sub_account'
  const kind = name.endsWith('.rate') ? 'rate' : 'monthly_quota'
  return LIMIT_POLICIES.indexOf(`${level}.meters.${kind}`)
}

export interface LimitMetrics {
  /** By policy (LIMIT_POLICIES order): requests a policy let through, and requests it refused. */
  readonly admitted: readonly Tally[]
  readonly refused: readonly Tally[]
  /** By shadow policy (SHADOW_POLICIES order): admitted requests a shadow limit would have refused. */
  readonly shadowRefused: readonly Tally[]
  readonly leaseCalls: Tally
  readonly leaseFailures: Tally
  /** Units leased from Redis, and units given back (background work, per lease call). */
  readonly unitsTaken: Counter
  readonly unitsReturned: Counter
  /**
   * Requests that awaited a limit's lease (limiter.warm): its first (one per tenant and replica), or
   * a renewal after a burst emptied it while the limit was not reached; never past a limit.
   */
  readonly coldWaits: Tally
  /** How long each of those requests waited (tgw_redis_wait_seconds{wait="lease"}). */
  readonly leaseWait: LatencySeries
  readonly degraded: Gauge
}

export function limitMetrics(registers: Registry[]): Omit<LimitMetrics, 'leaseWait'> {
  const decisions = talliedCounter(
    {
      name: 'tgw_limit_decisions_total',
      help: 'Requests under a limit, by policy and outcome (admitted, refused)',
      labelNames: ['policy', 'outcome'] as const,
      registers,
    },
    LIMIT_POLICIES.flatMap((policy) => [
      { policy, outcome: 'admitted' },
      { policy, outcome: 'refused' },
    ]),
  )
  const shadowRefused = talliedCounter(
    {
      name: 'tgw_limit_shadow_refusals_total',
      help: 'Admitted requests a shadow limit would have refused, by policy (it refuses none)',
      labelNames: ['policy'] as const,
      registers,
    },
    SHADOW_POLICIES.map((policy) => ({ policy })),
  )
  return {
    admitted: LIMIT_POLICIES.map((_, i) => decisions[2 * i]!),
    refused: LIMIT_POLICIES.map((_, i) => decisions[2 * i + 1]!),
    shadowRefused,
    leaseCalls: tally({
      name: 'tgw_limit_lease_calls_total',
      help: 'Lease calls sent to Redis (taking, renewing or giving back units)',
      registers,
    }),
    unitsTaken: new Counter({
      name: 'tgw_limit_units_leased_total',
      help: 'Units of limits this replica leased from Redis',
      registers,
    }),
    unitsReturned: new Counter({
      name: 'tgw_limit_units_returned_total',
      help: 'Units of limits this replica gave back to Redis unused (refunds included)',
      registers,
    }),
    leaseFailures: tally({
      name: 'tgw_limit_lease_failures_total',
      help: 'Lease calls that failed or timed out',
      registers,
    }),
    coldWaits: tally({
      name: 'tgw_limit_cold_waits_total',
      help: "Requests that waited for a limit's lease from Redis before their decision (its first, or a renewal after a burst emptied it while the limit was not reached)",
      registers,
    }),
    degraded: new Gauge({
      name: 'tgw_limits_degraded',
      help: '1 while Redis is unusable and this replica enforces every limit on its own',
      registers,
    }),
  }
}

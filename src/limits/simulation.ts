// The limit simulator (docs/api.md, The limit simulator): requests of the past replayed, in the
// order they arrived, through the limiter itself, in its embedded mode on a clock that follows the
// requests, so that what it answers is what these limits would have done: the same token bucket,
// the same calendar-month quota (counting the month's use before the range), the same debts of
// units charged when each answer ended. No other copy of the algorithm exists to drift from it.
import { Limiter } from './limiter.js'
import type { Limits, LimitSubject } from './types.js'

/** One request to replay. */
export interface SimulatedRequest {
  tenantId: string
  /** When it arrived, and when its answer ended (ms since the epoch). */
  startMs: number
  endMs: number
  /** Its route's cost. */
  cost: number
  /** The units its upstream reported, by meter; null when none. */
  units: ReadonlyMap<string, number> | null
}

/** What the limits would have done to one sub-account's requests. */
export interface SimulatedTenant {
  sub_account_id: string
  requests: number
  would_refuse: number
  first_refusal_at: string | null
  /** The second (UTC, whole) that saw the most of its requests, and how many. */
  peak_second: { at: string; requests: number }
  /** What its requests counted, by meter: `requests` at their cost, and the reported ones. */
  units: Record<string, number>
}

/** The month's use of a quota before the range: `meter` of `tenantId` in the month `YYYY-MM`. */
export type UseBefore = (tenantId: string, meter: string, month: string) => number

/** A min-heap of the charges still to come, by when their answers ended. */
class Charges {
  private readonly heap: { atMs: number; subjects: readonly LimitSubject[]; units: ReadonlyMap<string, number> }[] = []
  push(charge: { atMs: number; subjects: readonly LimitSubject[]; units: ReadonlyMap<string, number> }): void {
    const heap = this.heap
    heap.push(charge)
    for (let i = heap.length - 1; i > 0; ) {
      const up = (i - 1) >> 1
      if (heap[up]!.atMs <= heap[i]!.atMs) break
      ;[heap[up], heap[i]] = [heap[i]!, heap[up]!]
      i = up
    }
  }
  /** Takes the earliest charge due by `atMs`, or undefined. */
  due(atMs: number) {
    const heap = this.heap
    if (heap.length === 0 || heap[0]!.atMs > atMs) return undefined
    const first = heap[0]!
    const last = heap.pop()!
    if (heap.length > 0) {
      heap[0] = last
      for (let i = 0; ; ) {
        const l = 2 * i + 1
        const r = l + 1
        let least = i
        if (l < heap.length && heap[l]!.atMs < heap[least]!.atMs) least = l
        if (r < heap.length && heap[r]!.atMs < heap[least]!.atMs) least = r
        if (least === i) break
        ;[heap[least], heap[i]] = [heap[i]!, heap[least]!]
        i = least
      }
    }
    return first
  }
}

/**
 * Replays `requests` (in arrival order) under `limits`, as each sub-account's own: its rate
 * starts full at its first request of the range, and its quotas count the month's use before it.
 */
export async function simulateLimits(
  requests: readonly SimulatedRequest[],
  limits: Limits,
  useBefore: UseBefore,
): Promise<SimulatedTenant[]> {
  let now = requests[0]?.startMs ?? 0
  const limiter = new Limiter({
    redis: null,
    keyPrefix: 'simulation:',
    now: () => now,
    sweepEveryMs: 0,
    loadMonthUse: async (subject, month) => useBefore(subject.tenantId, subject.meter, month),
  })
  const subjects = new Map<string, readonly LimitSubject[]>()
  const tenants = new Map<string, SimulatedTenant & { second: number; inSecond: number }>()
  const charges = new Charges()
  try {
    for (const request of requests) {
      // Answers that ended before this request arrived are charged first, as they were.
      for (let charge = charges.due(request.startMs); charge !== undefined; charge = charges.due(request.startMs)) {
        now = charge.atMs
        limiter.charge(charge.subjects, charge.units)
      }
      now = request.startMs
      let own = subjects.get(request.tenantId)
      if (own === undefined) {
        own = [{ tenantId: request.tenantId, level: 'sub_account', limits }]
        subjects.set(request.tenantId, own)
      }
      // A quota's month is read before its first decision (the limiter waits for it as for a lease).
      if (!limiter.isWarm(own, request.cost)) await limiter.warm(own, 10_000, request.cost)
      const decision = limiter.admit(own, request.cost)
      const tenant = tally(tenants, request)
      if (!decision.allowed) {
        tenant.would_refuse++
        tenant.first_refusal_at ??= new Date(request.startMs).toISOString()
      } else if (request.units !== null) charges.push({ atMs: request.endMs, subjects: own, units: request.units })
    }
  } finally {
    await limiter.close()
  }
  return [...tenants.values()].map(({ second: _, inSecond: __, ...tenant }) => tenant)
}

/** Counts a request for its sub-account: its units, and the busiest second. */
function tally(
  tenants: Map<string, SimulatedTenant & { second: number; inSecond: number }>,
  request: SimulatedRequest,
): SimulatedTenant & { second: number; inSecond: number } {
  let tenant = tenants.get(request.tenantId)
  if (tenant === undefined) {
    tenant = {
      sub_account_id: request.tenantId,
      requests: 0,
      would_refuse: 0,
      first_refusal_at: null,
      peak_second: { at: '', requests: 0 },
      units: {},
      second: -1,
      inSecond: 0,
    }
    tenants.set(request.tenantId, tenant)
  }
  tenant.requests++
  tenant.units.requests = (tenant.units.requests ?? 0) + request.cost
  if (request.units !== null)
    for (const [meter, units] of request.units) tenant.units[meter] = (tenant.units[meter] ?? 0) + units
  const second = Math.floor(request.startMs / 1000)
  if (second !== tenant.second) {
    tenant.second = second
    tenant.inSecond = 0
  }
  tenant.inSecond++
  if (tenant.inSecond > tenant.peak_second.requests)
    tenant.peak_second = { at: new Date(second * 1000).toISOString(), requests: tenant.inSecond }
  return tenant
}

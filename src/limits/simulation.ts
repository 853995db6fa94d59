// The limit simulator (docs/api.md, The limit simulator): requests of the past replayed, in the
// order they arrived, through the limiter itself, in its embedded mode on a clock that follows the
// requests, so that what it answers is what these limits would have done: the same token bucket,
// the same calendar-month quota (counting the month's use before the range), the same debts of
// units charged when each answer ended. No other copy of the algorithm exists to drift from it.
import { Limiter } from './limiter.js'
import { monthBounds } from './month.js'
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
 * Replays requests (in arrival order, batch after batch as they are read) under `limits`, as each
 * sub-account's own: its rate starts full at its first request of the range, and its quotas count
 * the month's use before it. `close` gives the answer.
 */
export class LimitReplay {
  private now = 0
  private readonly limiter: Limiter
  private readonly subjects = new Map<string, { subjects: readonly LimitSubject[]; warmUntil: number }>()
  private readonly tenants = new Map<string, SimulatedTenant & { second: number; inSecond: number }>()
  private readonly charges = new Charges()

  private readonly limits: Limits
  constructor(limits: Limits, useBefore: UseBefore) {
    this.limits = limits
    this.limiter = new Limiter({
      redis: null,
      keyPrefix: 'simulation:',
      now: () => this.now,
      sweepEveryMs: 0,
      loadMonthUse: async (subject, month) => useBefore(subject.tenantId, subject.meter, month),
    })
  }

  async add(requests: readonly SimulatedRequest[]): Promise<void> {
    const limiter = this.limiter
    for (const request of requests) {
      // Answers that ended before this request arrived are charged first, as they were.
      for (
        let charge = this.charges.due(request.startMs);
        charge !== undefined;
        charge = this.charges.due(request.startMs)
      ) {
        this.now = charge.atMs
        limiter.charge(charge.subjects, charge.units)
      }
      this.now = request.startMs
      let own = this.subjects.get(request.tenantId)
      if (own === undefined) {
        own = { subjects: [{ tenantId: request.tenantId, level: 'sub_account', limits: this.limits }], warmUntil: 0 }
        this.subjects.set(request.tenantId, own)
      }
      // A quota's month is read before its first decision of the month (the limiter waits for it
      // as for a lease); within the month its limits decide from memory.
      if (request.startMs >= own.warmUntil) {
        await limiter.warm(own.subjects, 10_000, request.cost)
        own.warmUntil = monthBounds(request.startMs).end
      }
      const decision = limiter.admit(own.subjects, request.cost)
      const tenant = tally(this.tenants, request)
      if (!decision.allowed) {
        tenant.would_refuse++
        tenant.first_refusal_at ??= new Date(request.startMs).toISOString()
      } else if (request.units !== null)
        this.charges.push({ atMs: request.endMs, subjects: own.subjects, units: request.units })
    }
  }

  /** Every sub-account replayed, and what the limits would have done to it. */
  async close(): Promise<SimulatedTenant[]> {
    await this.limiter.close()
    return [...this.tenants.values()].map(({ second: _, inSecond: __, ...tenant }) => tenant)
  }
}

/** `LimitReplay` over requests all at hand. */
export async function simulateLimits(
  requests: readonly SimulatedRequest[],
  limits: Limits,
  useBefore: UseBefore,
): Promise<SimulatedTenant[]> {
  const replay = new LimitReplay(limits, useBefore)
  await replay.add(requests)
  return replay.close()
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

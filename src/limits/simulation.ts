// The limit simulator (docs/api.md, The limit simulator): requests of the past replayed, in the
// order they arrived, through the limiter itself, in its embedded mode on a clock that follows the
// requests, so that what it answers is what these limits would have done: the same token bucket,
// the same calendar-month quota (counting the month's use before the range), the same debts of
// units charged when each answer ended. No other copy of the algorithm exists to drift from it.
import { Limiter } from './limiter.js'
import { monthBounds } from './month.js'
import type { Limits, LimitSubject, ReportedUnits } from './types.js'

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

/** The same as data (a thread's replay is handed it): `uses` by `<tenant> <meter>`, in `month` only. */
export interface MonthUseBefore {
  month: string
  uses: ReadonlyMap<string, number>
}

export function useBeforeOf({ month, uses }: MonthUseBefore): UseBefore {
  return (tenantId, meter, inMonth) => (inMonth === month ? (uses.get(`${tenantId} ${meter}`) ?? 0) : 0)
}

/**
 * The most sub-accounts one simulation replays (docs/api.md). Each holds its limits' state and its
 * line of the answer until the close, about 3 KB: a range of 10^5 active sub-accounts would outgrow
 * a replica's heap (160 MB in the image) and stop it. Past it the read stops with a 400.
 */
export const SIMULATION_MAX_SUB_ACCOUNTS = 20_000

/** Requests taken in the order they arrived (`take`), then what the limits would have done (`close`). */
export interface RequestReplay {
  take(
    tenantId: string,
    startMs: number,
    endMs: number,
    cost: number,
    units: Readonly<Record<string, number>> | null,
  ): Promise<void> | undefined
  close(): Promise<SimulatedTenant[]>
  /** The sub-accounts taken so far: each holds its own limits' state until the close. */
  readonly subAccounts: number
}

/** A min-heap of a sub-account's charges still to come, by when their answers ended. */
class Charges {
  private readonly heap: { atMs: number; units: ReportedUnits }[] = []
  push(charge: { atMs: number; units: ReportedUnits }): void {
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

/** A record's reported units, as the limiter asks for them (a meter's, own properties only). */
class Reported implements ReportedUnits {
  readonly units: Readonly<Record<string, number>>
  constructor(units: Readonly<Record<string, number>>) {
    this.units = units
  }
  get(meter: string): number | undefined {
    return Object.hasOwn(this.units, meter) ? this.units[meter] : undefined
  }
}

/** A sub-account being replayed: its own subjects, and what it has counted so far. */
interface Replayed extends SimulatedTenant {
  subjects: readonly LimitSubject[]
  /** Its quotas decide from memory until then (the end of the month of its last month's read). */
  warmUntil: number
  /** The second (whole, since the epoch) of its last request, and how many it has seen in it. */
  second: number
  inSecond: number
  /** Its requests taken and not replayed yet: start, end and cost of each, in turn; and their units. */
  queued: number[]
  queuedUnits: (Readonly<Record<string, number>> | null)[]
  /** Its admitted requests' units still to charge, by when their answers ended. */
  charges: Charges
}

/**
 * Requests held before they are replayed, a sub-account at a time: each one's limits are then
 * touched in a run, not at random among thousands (a third less time over 10^6 requests). Its own
 * requests keep their order, and no sub-account's limits depend on another's.
 */
const QUEUED_AT_MOST = 20_000

/** Sub-accounts replayed between two turns of the event loop. */
export const TENANTS_A_TURN = 500

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

/**
 * Replays requests, taken in the order they arrived, under `limits`, as each sub-account's own:
 * its rate starts full at its first request of the range, and its quotas count the month's use
 * before it. `close` gives the answer.
 */
export class LimitReplay implements RequestReplay {
  private now = 0
  private readonly limiter: Limiter
  private readonly tenants = new Map<string, Replayed>()
  private readonly limits: Limits
  /** The sub-accounts with requests held, in the order of their first; and how many requests. */
  private readonly waiting: Replayed[] = []
  private queuedCount = 0

  get subAccounts(): number {
    return this.tenants.size
  }

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

  /**
   * One request: `tenantId`'s, arrived at `startMs`, its answer ended at `endMs`, at its route's
   * `cost`, its upstream having reported `units` (by meter, or null). Requests are taken in the
   * order they arrived, and held until a batch is replayed (`QUEUED_AT_MOST`): a promise, then,
   * that the next request waits for.
   */
  take(
    tenantId: string,
    startMs: number,
    endMs: number,
    cost: number,
    units: Readonly<Record<string, number>> | null,
  ): Promise<void> | undefined {
    const tenant = this.tenants.get(tenantId) ?? this.newTenant(tenantId)
    if (tenant.queuedUnits.length === 0) this.waiting.push(tenant)
    tenant.queued.push(startMs, endMs, cost)
    tenant.queuedUnits.push(units)
    if (++this.queuedCount < QUEUED_AT_MOST) return undefined
    return this.replayQueued()
  }

  /** Replays every request held, a sub-account at a time. */
  private async replayQueued(): Promise<void> {
    let replayed = 0
    for (const tenant of this.waiting) {
      // A sub-account's first request waits for its month's use, a promise: thousands of them in a
      // row never let the event loop turn (an outside attack's 18,000 held it 1.1 s). A turn is let
      // through every so many sub-accounts, on the read's thread as on the replay's own.
      if (++replayed % TENANTS_A_TURN === 0) await nextTurn()
      const { queued, queuedUnits } = tenant
      for (let i = 0; i < queuedUnits.length; i++) {
        const waiting = this.replay(tenant, queued[3 * i]!, queued[3 * i + 1]!, queued[3 * i + 2]!, queuedUnits[i]!)
        if (waiting !== undefined) await waiting
      }
      queued.length = 0
      queuedUnits.length = 0
    }
    this.waiting.length = 0
    this.queuedCount = 0
  }

  /**
   * One request of `tenant` through the limiter, at its time. A promise only when it must wait: for
   * the month's use, read before a quota's first decision of a month (the limiter waits for it as
   * for a lease).
   */
  private replay(
    tenant: Replayed,
    startMs: number,
    endMs: number,
    cost: number,
    units: Readonly<Record<string, number>> | null,
  ): Promise<void> | undefined {
    // Its answers that ended before this request arrived are charged first, as they were.
    for (let charge = tenant.charges.due(startMs); charge !== undefined; charge = tenant.charges.due(startMs)) {
      this.now = charge.atMs
      this.limiter.charge(tenant.subjects, charge.units)
    }
    this.now = startMs
    if (startMs < tenant.warmUntil) {
      this.decide(tenant, startMs, endMs, cost, units)
      return undefined
    }
    return this.limiter.warm(tenant.subjects, 10_000, cost).then(() => {
      tenant.warmUntil = monthBounds(startMs).end
      this.now = startMs
      this.decide(tenant, startMs, endMs, cost, units)
    })
  }

  private newTenant(tenantId: string): Replayed {
    const tenant: Replayed = {
      sub_account_id: tenantId,
      requests: 0,
      would_refuse: 0,
      first_refusal_at: null,
      peak_second: { at: '', requests: 0 },
      units: {},
      subjects: [{ tenantId, level: 'sub_account', limits: this.limits }],
      warmUntil: 0,
      second: -1,
      inSecond: 0,
      queued: [],
      queuedUnits: [],
      charges: new Charges(),
    }
    this.tenants.set(tenantId, tenant)
    return tenant
  }

  private decide(
    tenant: Replayed,
    startMs: number,
    endMs: number,
    cost: number,
    units: Readonly<Record<string, number>> | null,
  ): void {
    tally(tenant, startMs, cost, units)
    if (!this.limiter.admit(tenant.subjects, cost, false).allowed) {
      tenant.would_refuse++
      tenant.first_refusal_at ??= new Date(startMs).toISOString()
    } else if (units !== null) tenant.charges.push({ atMs: endMs, units: new Reported(units) })
  }

  /** Every sub-account replayed, and what the limits would have done to it. */
  async close(): Promise<SimulatedTenant[]> {
    await this.replayQueued()
    await this.limiter.close()
    return [...this.tenants.values()].map(
      ({ sub_account_id, requests, would_refuse, first_refusal_at, peak_second, units }) => ({
        sub_account_id,
        requests,
        would_refuse,
        first_refusal_at,
        peak_second,
        units,
      }),
    )
  }
}

/** Counts a request for its sub-account: its units, and the busiest second. */
function tally(tenant: Replayed, startMs: number, cost: number, units: Readonly<Record<string, number>> | null): void {
  tenant.requests++
  tenant.units.requests = (tenant.units.requests ?? 0) + cost
  // A meter's name is data: `constructor` is read as an own property only, never Object's.
  if (units !== null)
    for (const meter of Object.keys(units))
      tenant.units[meter] = (Object.hasOwn(tenant.units, meter) ? tenant.units[meter]! : 0) + units[meter]!
  const second = Math.floor(startMs / 1000)
  if (second !== tenant.second) {
    tenant.second = second
    tenant.inSecond = 0
  }
  tenant.inSecond++
  if (tenant.inSecond > tenant.peak_second.requests)
    tenant.peak_second = { at: new Date(second * 1000).toISOString(), requests: tenant.inSecond }
}

// How many requests a route has in flight to its upstream, and each resolved tenant's share of
// them (docs/api.md, "time and connections are bounded"). Without it one tenant's slow uploads or
// unread downloads take every upstream connection of a route and everyone else's requests queue
// behind them. Plain logic, no server: a request takes a slot before it leaves for the upstream
// and gives it back when its exchange with the client is over.

export type SlotRefusal = 'tenant_busy' | 'route_busy'

/** Called once: with null when the request holds a slot, or with why it got none. */
export type SlotCallback = (refusal: SlotRefusal | null) => void

interface Waiter {
  readonly tenantId: string | null
  readonly callback: SlotCallback
  timer: NodeJS.Timeout | null
}

export class RouteConcurrency {
  /** Requests holding a slot. */
  private inFlight = 0
  /** Requests holding or waiting for a slot, by resolved tenant. */
  private readonly byTenant = new Map<string, number>()
  private readonly waiters: Waiter[] = []

  constructor(
    readonly maxConnections: number,
    readonly maxPerTenant: number,
    /** How long a request may wait for a slot (the route's timeout_ms). */
    readonly maxWaitMs: number,
  ) {}

  get active(): number {
    return this.inFlight
  }

  get waiting(): number {
    return this.waiters.length
  }

  /**
   * A tenant at its share is refused at once; otherwise the request takes a free slot, or waits
   * for one at most maxWaitMs. `tenantId` is null on a public route, which has no tenant share.
   * Returns true when the slot was taken synchronously (the callback has not been called then).
   */
  tryAcquire(tenantId: string | null, callback: SlotCallback): boolean {
    if (tenantId !== null) {
      const held = this.byTenant.get(tenantId) ?? 0
      if (held >= this.maxPerTenant) {
        callback('tenant_busy')
        return false
      }
      this.byTenant.set(tenantId, held + 1)
    }
    if (this.inFlight < this.maxConnections && this.waiters.length === 0) {
      this.inFlight++
      return true
    }
    const waiter: Waiter = { tenantId, callback, timer: null }
    waiter.timer = setTimeout(() => this.giveUp(waiter), this.maxWaitMs)
    this.waiters.push(waiter)
    return false
  }

  /** Gives a slot back: the oldest waiter gets it, or it is free. */
  release(tenantId: string | null): void {
    this.forgetTenant(tenantId)
    const next = this.waiters.shift()
    if (next === undefined) {
      this.inFlight--
      return
    }
    clearTimeout(next.timer!)
    next.callback(null)
  }

  private giveUp(waiter: Waiter): void {
    const index = this.waiters.indexOf(waiter)
    if (index === -1) return
    this.waiters.splice(index, 1)
    this.forgetTenant(waiter.tenantId)
    waiter.callback('route_busy')
  }

  private forgetTenant(tenantId: string | null): void {
    if (tenantId === null) return
    const held = this.byTenant.get(tenantId)!
    if (held <= 1) this.byTenant.delete(tenantId)
    else this.byTenant.set(tenantId, held - 1)
  }
}

/** A quarter of the route's connections, and at least one (docs/configuration.md). */
export function defaultPerTenant(maxConnections: number): number {
  return Math.max(1, Math.floor(maxConnections / 4))
}

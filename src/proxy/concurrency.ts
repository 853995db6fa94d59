// How many requests a route has in flight to its upstream, and each resolved tenant's share of
// them (docs/api.md, "time and connections are bounded"). Without it one tenant's slow uploads or
// unread downloads take every upstream connection of a route and everyone else's requests queue
// behind them. Plain logic, no server: a request takes a slot before it leaves for the upstream
// and gives it back when its exchange is over.

export type SlotRefusal = 'tenant_busy' | 'route_busy'

/** Called at most once: with null when the request holds a slot, or with why it got none. */
export type SlotCallback = (refusal: SlotRefusal | null) => void

/** What tryAcquire did: the slot is held, the request was refused (its callback said why), or it waits. */
export type Attempt = 'taken' | 'refused' | 'waiting'

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
  /** Set while slots are handed to waiters: a waiter given one may give it back at once. */
  private handingOff = false

  constructor(
    readonly maxConnections: number,
    readonly maxPerTenant: number,
    /** How long a request may wait for a slot (the route's timeout_ms). */
    readonly maxWaitMs: number,
    /** How many may wait at once; more are refused at once (a public route has no tenant share). */
    readonly maxWaiting = maxConnections,
  ) {}

  get active(): number {
    return this.inFlight
  }

  get waiting(): number {
    return this.waiters.length
  }

  /**
   * A tenant at its share is refused at once; otherwise the request takes a free slot, or waits
   * for one at most maxWaitMs (unless too many wait already). `tenantId` is null on a public
   * route, which has no tenant share. The callback is called only for 'refused' (at once) and
   * 'waiting' (later, unless withdrawn).
   */
  tryAcquire(tenantId: string | null, callback: SlotCallback): Attempt {
    if (tenantId !== null) {
      const held = this.byTenant.get(tenantId) ?? 0
      if (held >= this.maxPerTenant) {
        callback('tenant_busy')
        return 'refused'
      }
      this.byTenant.set(tenantId, held + 1)
    }
    if (this.inFlight < this.maxConnections && this.waiters.length === 0) {
      this.inFlight++
      return 'taken'
    }
    if (this.waiters.length >= this.maxWaiting) {
      this.forgetTenant(tenantId)
      callback('route_busy')
      return 'refused'
    }
    const waiter: Waiter = { tenantId, callback, timer: null }
    waiter.timer = setTimeout(() => this.giveUp(waiter), this.maxWaitMs)
    this.waiters.push(waiter)
    return 'waiting'
  }

  /** A waiting request whose client left: out of the queue, its tenant share given back, never called. */
  withdraw(callback: SlotCallback): void {
    const index = this.waiters.findIndex((waiter) => waiter.callback === callback)
    if (index === -1) return
    const [waiter] = this.waiters.splice(index, 1)
    clearTimeout(waiter!.timer!)
    this.forgetTenant(waiter!.tenantId)
  }

  /** Gives a slot back: the oldest waiter gets it, or it is free. */
  release(tenantId: string | null): void {
    this.forgetTenant(tenantId)
    this.inFlight--
    this.handOff()
  }

  /**
   * A loop, not a chain of calls: a waiter handed a slot may give it back within its callback (its
   * client is gone), and a long queue of those must not grow the stack.
   */
  private handOff(): void {
    if (this.handingOff) return
    this.handingOff = true
    try {
      while (this.inFlight < this.maxConnections && this.waiters.length > 0) {
        const next = this.waiters.shift()!
        clearTimeout(next.timer!)
        this.inFlight++
        next.callback(null)
      }
    } finally {
      this.handingOff = false
    }
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

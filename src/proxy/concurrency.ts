// How many requests a route has in flight to its upstream, each resolved tenant's share of them,
// and each parent account's (docs/api.md, "time and connections are bounded"). Without them one
// tenant's slow uploads or unread downloads take every upstream connection of a route and
// everyone else's requests queue behind them; and a parent acting as many sub-accounts (which cost
// nothing to create) would get a tenant's share per sub-account. Plain logic, no server: a request
// takes a slot before it leaves for the upstream and gives it back when its exchange is over.

export type SlotRefusal = 'tenant_busy' | 'account_busy' | 'route_busy'

/**
 * Whose share a request counts against: the tenant it acts as, and the parent account its key
 * belongs to (the parent itself, or a sub-account's parent). null on a public route.
 */
export interface SlotHolder {
  readonly tenantId: string
  readonly accountId: string
}

/** Counts per id, up to a share; an id goes when its count falls to zero. */
class Shares {
  private readonly held = new Map<string, number>()

  readonly share: number
  constructor(share: number) {
    this.share = share
  }

  /** Takes one for `id` unless it holds its share already. */
  take(id: string): boolean {
    const held = this.held.get(id) ?? 0
    if (held >= this.share) return false
    this.held.set(id, held + 1)
    return true
  }

  giveBack(id: string): void {
    const held = this.held.get(id)!
    if (held <= 1) this.held.delete(id)
    else this.held.set(id, held - 1)
  }
}

/** Called at most once: with null when the request holds a slot, or with why it got none. */
export type SlotCallback = (refusal: SlotRefusal | null) => void

interface Waiter {
  readonly holder: SlotHolder | null
  readonly callback: SlotCallback
  timer: NodeJS.Timeout | null
}

export class RouteConcurrency {
  /** Requests holding a slot. */
  private inFlight = 0
  /** Requests holding or waiting for a slot, by resolved tenant and by parent account. */
  private readonly byTenant: Shares
  private readonly byAccount: Shares
  private readonly waiters: Waiter[] = []
  /** Set while slots are handed to waiters: a waiter given one may give it back at once. */
  private handingOff = false

  readonly maxConnections: number
  readonly maxPerTenant: number
  readonly maxPerAccount: number
  /** How long a request may wait for a slot (the route's timeout_ms). */
  readonly maxWaitMs: number
  /** How many may wait at once; more are refused at once (a public route has no tenant share). */
  readonly maxWaiting
  constructor(
    maxConnections: number,
    maxPerTenant: number,
    maxPerAccount: number,
    maxWaitMs: number,
    maxWaiting = maxConnections,
  ) {
    this.maxConnections = maxConnections
    this.maxPerTenant = maxPerTenant
    this.maxPerAccount = maxPerAccount
    this.maxWaitMs = maxWaitMs
    this.maxWaiting = maxWaiting
    this.byTenant = new Shares(maxPerTenant)
    this.byAccount = new Shares(maxPerAccount)
  }

  get active(): number {
    return this.inFlight
  }

  get waiting(): number {
    return this.waiters.length
  }

  /**
   * A tenant or a parent account at its share is refused at once; otherwise the request takes a
   * free slot ('taken'), or may wait for one ('wait': then call wait), unless too many wait
   * already ('route_busy'). `holder` is null on a public route, which has no shares. Nothing is
   * held after a refusal; after 'wait' the holder's shares are, until wait's callback or withdraw.
   */
  take(holder: SlotHolder | null): 'taken' | 'wait' | SlotRefusal {
    if (holder !== null) {
      if (!this.byTenant.take(holder.tenantId)) return 'tenant_busy'
      if (!this.byAccount.take(holder.accountId)) {
        this.byTenant.giveBack(holder.tenantId)
        return 'account_busy'
      }
    }
    if (this.inFlight < this.maxConnections && this.waiters.length === 0) {
      this.inFlight++
      return 'taken'
    }
    if (this.waiters.length >= this.maxWaiting) {
      this.forgetHolder(holder)
      return 'route_busy'
    }
    return 'wait'
  }

  /** Queues a request that take() told to wait: `callback` gets its slot, or 'route_busy' after maxWaitMs. */
  wait(holder: SlotHolder | null, callback: SlotCallback): void {
    const waiter: Waiter = { holder, callback, timer: null }
    waiter.timer = setTimeout(() => this.giveUp(waiter), this.maxWaitMs)
    this.waiters.push(waiter)
  }

  /** A waiting request whose client left: out of the queue, its tenant share given back, never called. */
  withdraw(callback: SlotCallback): void {
    const index = this.waiters.findIndex((waiter) => waiter.callback === callback)
    if (index === -1) return
    const [waiter] = this.waiters.splice(index, 1)
    clearTimeout(waiter!.timer!)
    this.forgetHolder(waiter!.holder)
  }

  /** Gives a slot back: the oldest waiter gets it, or it is free. */
  release(holder: SlotHolder | null): void {
    this.forgetHolder(holder)
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
    this.forgetHolder(waiter.holder)
    waiter.callback('route_busy')
  }

  private forgetHolder(holder: SlotHolder | null): void {
    if (holder === null) return
    this.byTenant.giveBack(holder.tenantId)
    this.byAccount.giveBack(holder.accountId)
  }
}

/** A quarter of the route's connections, and at least one (docs/configuration.md). */
export function defaultPerTenant(maxConnections: number): number {
  return Math.max(1, Math.floor(maxConnections / 4))
}

/** Half of the route's connections, and at least one (docs/configuration.md). */
export function defaultPerAccount(maxConnections: number): number {
  return Math.max(1, Math.floor(maxConnections / 2))
}

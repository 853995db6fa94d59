// A route's targets (docs/configuration.md, routes: `targets`), as one undici dispatcher that
// upstream-target.ts sends through as it would through one pool: each request goes to the target
// its balancer picks among those that may take one (not ejected by passive health, not failing
// active checks), through that target's own pool of max_connections. When none may, the route
// panics and picks among all of them: a wrong health check must not take a service down.
import type { Dispatcher } from 'undici'
import type { Pool } from 'undici'
import { type Balanced, type Balancer, hashString, leastRequest, roundRobin, tenantHash } from './balancers.js'
import { type Checked, HealthChecks } from './health-check.js'
import { type Outcome, Outlier, OutlierState } from './outlier.js'
import type { Balance, RouteTargets } from './route-options.js'
import { type TargetAccount, TargetCall } from './target-call.js'

/** One target: its pools, its load and its health. */
export class Target implements Balanced, Checked, TargetAccount {
  readonly url: string
  readonly host: string
  readonly weight: number
  readonly seed: number
  /** Its own pool of max_connections. */
  readonly pool: Pool
  /** One connection of its own for the active checks (none without them): never behind requests. */
  readonly checkPool: Pool | null
  inFlight = 0
  current = 0
  healthy = true
  readonly outlier = new OutlierState()

  private readonly onSettled: (outcome: Outcome) => void
  constructor(url: string, weight: number, pool: Pool, checkPool: Pool | null, onSettled: (outcome: Outcome) => void) {
    this.url = url
    this.checkPool = checkPool
    this.host = new URL(url).host
    this.weight = weight
    this.seed = hashString(url)
    this.pool = pool
    this.onSettled = onSettled
  }

  /**
   * Sends a request through its pool, counted in flight until its answer ends, its outcome told
   * to passive health (target-call.ts). Straight to the pool: an undici interceptor composed on
   * it would cost a Proxy's trap and two more calls a request.
   */
  send(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): void {
    // The upstream's Host is the target's (upstream-target.ts set the route's first).
    ;(options.headers as Record<string, string>).host = this.host
    this.inFlight++
    this.pool.dispatch(options, new TargetCall(handler, this))
  }

  settled(outcome: Outcome): void {
    this.onSettled(outcome)
  }
}

/** A target's state at scrape time (tgw_upstream_target_up). */
export interface TargetReading {
  readonly target: string
  /** The route's cell the target serves; '' for a route's own targets. */
  readonly cell: string
  readonly up: boolean
}

/**
 * A target as the Routes screen shows it (proxy/route-status.ts): `failing_checks` when its active
 * checks took it out (whether or not passive health did too), `ejected` when passive health did.
 */
export type TargetState = 'up' | 'ejected' | 'failing_checks'

export interface TargetStatus {
  readonly weight: number
  /** The route's cell the target serves; null for a route's own targets. */
  readonly cell: string | null
  readonly state: TargetState
}

/** What the metrics read of a route's targets (proxy/metrics.ts). */
export interface UpstreamsReadout {
  readTargets(): TargetReading[]
  /** Each target's weight, cell and state, in the route table's order (proxy/route-status.ts). */
  readStates(): TargetStatus[]
  /** Every target is out: requests go to all of them. */
  panic(): boolean
}

/** What a WebSocket's upgrade picks its upstream from (steps/websocket-connect.ts). */
export interface SocketBalancer {
  /** The URL of the target for a socket of `tenantId` in `cell` (null: placed nowhere). */
  socketTarget(tenantId: string | undefined, cell: string | null): string
}

export interface RouteUpstreamsOptions {
  /**
   * Each target's pool, made as the route's one-upstream pool is (upstream-target.ts), of the
   * route's max_connections, or of `connections` (the active checks' one).
   */
  makePool(origin: string, connections?: number): Pool
  /** The clock of passive health, in ms (default Date.now; tests move it). */
  clock?: () => number
  /** A target was ejected (tgw_upstream_ejections_total). */
  onEject?(target: string): void
  /** The cell these targets serve (route-cells.ts); absent for a route's own targets. */
  cell?: string
}

function balancerFor(balance: Balance): Balancer {
  if (balance === 'round_robin') return roundRobin()
  return balance === 'tenant_hash' ? tenantHash : leastRequest
}

type DispatchOptions = Dispatcher.DispatchOptions & { headers: Record<string, string | string[] | undefined> }

export class RouteUpstreams implements UpstreamsReadout, SocketBalancer {
  readonly targets: readonly Target[]
  private readonly balancer: Balancer
  private readonly outlier: Outlier
  private readonly checks: HealthChecks | null
  private readonly clock: () => number
  private readonly cell: string
  /** The balancer reads the request's tenant (tenant_hash). */
  private readonly byTenant: boolean
  /** Targets failing their active checks, counted as the checks change them. */
  private unhealthy = 0
  /** The targets that may take a request, refilled at each pick (one array for all requests). */
  private readonly candidates: Target[] = []

  constructor(options: RouteTargets, deps: RouteUpstreamsOptions) {
    this.clock = deps.clock ?? Date.now
    this.cell = deps.cell ?? ''
    const checked = options.healthCheck !== null
    const targets: Target[] = options.targets.map(({ url, weight }, index) => {
      const origin = new URL(url).origin
      return new Target(url, weight, deps.makePool(origin), checked ? deps.makePool(origin, 1) : null, (outcome) =>
        this.outlier.settled(index, outcome),
      )
    })
    this.targets = targets
    this.balancer = balancerFor(options.balance)
    this.byTenant = options.balance === 'tenant_hash'
    this.outlier = new Outlier(
      options.outlier,
      targets.map((target) => target.outlier),
      this.clock,
      (index) => deps.onEject?.(targets[index]!.url),
    )
    this.checks =
      options.healthCheck === null
        ? null
        : new HealthChecks(options.healthCheck, targets, () => {
            this.unhealthy = targets.filter((target) => !target.healthy).length
          })
  }

  /**
   * The target for a request of `tenantId` (the resolved tenant, for tenant_hash). Marks the
   * target's trial request taken when it is on trial.
   */
  pick(tenantId: string | undefined, avoid: Target | null = null): Target {
    // Every target in (the usual case): no clock, no list; no target is on trial.
    if (avoid === null && this.unhealthy === 0 && this.outlier.out === 0)
      return this.balancer.pick(this.targets, tenantId)
    const now = this.clock()
    const target = this.choose(tenantId, now, avoid)
    this.outlier.dispatched(target.outlier, now)
    return target
  }

  /**
   * The target for a WebSocket of `tenantId`: picked as a request's, but a socket is no trial
   * (its life says nothing of the target's answers) and passive health does not hear of it.
   */
  pickForSocket(tenantId: string | undefined): Target {
    return this.choose(tenantId, this.clock())
  }

  /** A route's own targets serve a socket of any cell the cell step let through (none, here). */
  socketTarget(tenantId: string | undefined, _cell: string | null): string {
    return this.pickForSocket(tenantId).url
  }

  /**
   * The balancer's pick among the targets that may take a request, or among all when none may
   * (panic). `avoid`, the target a retry's failed attempt went to, is left out when another exists.
   */
  private choose(tenantId: string | undefined, now: number, avoid: Target | null = null): Target {
    const candidates = this.candidates
    for (const target of this.targets)
      if (target !== avoid && target.healthy && this.outlier.admits(target.outlier, now)) candidates.push(target)
    if (candidates.length === 0 && avoid !== null)
      for (const target of this.targets) if (target !== avoid) candidates.push(target)
    const target = this.balancer.pick(
      candidates.length > 0 ? candidates : avoid !== null ? [avoid] : this.targets,
      tenantId,
    )
    candidates.length = 0
    return target
  }

  /** undici's Dispatcher.dispatch, through the picked target's pool. */
  dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    this.dispatchAvoiding(options, handler, null)
    return true
  }

  /** One attempt of a request, to a target other than `avoid` when there is one (retry-call.ts); the target. */
  dispatchAvoiding(
    options: Dispatcher.DispatchOptions,
    handler: Dispatcher.DispatchHandler,
    avoid: Target | null,
  ): Target {
    // The resolved tenant as the gateway itself sets it for the upstream (headers.ts): a client's
    // X-Service-* never gets this far. A public route has none.
    const tenant = this.byTenant ? (options as DispatchOptions).headers['x-service-resolved-tenant'] : undefined
    const target = this.pick(typeof tenant === 'string' ? tenant : undefined, avoid)
    target.send(options, handler)
    return target
  }

  /** Up: passing its checks (or without them) and not ejected. */
  private isUp(target: Target, now: number): boolean {
    return target.healthy && !this.outlier.isEjected(target.outlier, now)
  }

  readTargets(): TargetReading[] {
    const now = this.clock()
    return this.targets.map((target) => ({ target: target.url, cell: this.cell, up: this.isUp(target, now) }))
  }

  /** Each target's weight and state, in the route table's order. */
  readStates(): TargetStatus[] {
    const now = this.clock()
    const cell = this.cell === '' ? null : this.cell
    return this.targets.map((target) => ({
      weight: target.weight,
      cell,
      state: !target.healthy ? 'failing_checks' : this.outlier.isEjected(target.outlier, now) ? 'ejected' : 'up',
    }))
  }

  panic(): boolean {
    const now = this.clock()
    return !this.targets.some((target) => this.isUp(target, now))
  }

  /** Ends the checks and every pool (the route's scope closes). */
  async destroy(): Promise<void> {
    this.checks?.close()
    await Promise.all(this.targets.flatMap((target) => [target.pool.destroy(), target.checkPool?.destroy()]))
  }
}

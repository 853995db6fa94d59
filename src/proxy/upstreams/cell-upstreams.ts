// A route with cells (route-cells.ts) as one undici dispatcher, as upstream-target.ts sends
// through: each request goes to the targets of the cell the gateway set in its X-Service-Cell
// (headers.ts; a client's never gets this far), or, without one, to the route's own upstream or
// targets. The cell step (steps/cell.ts) refused every request whose cell the route has no
// targets for, so a request never reaches another cell's target.
import type { Dispatcher, Pool } from 'undici'
import { CELL_HEADER } from '../headers.js'
import type { RouteCells } from './route-cells.js'
import {
  RouteUpstreams,
  type RouteUpstreamsOptions,
  type SocketBalancer,
  type Target,
  type TargetReading,
  type TargetStatus,
  type UpstreamsReadout,
} from './route-upstreams.js'

type DispatchOptions = Dispatcher.DispatchOptions & { headers: Record<string, string | string[] | undefined> }

export class CellUpstreams implements UpstreamsReadout, SocketBalancer {
  readonly byCell: ReadonlyMap<string, RouteUpstreams>
  /** The route's own upstream (a pool) or targets, for a request placed nowhere; null: none. */
  private readonly own: Pool | RouteUpstreams | null
  private readonly ownUrl: string

  constructor(
    cells: RouteCells,
    own: Pool | RouteUpstreams | null,
    ownUrl: string,
    deps: Omit<RouteUpstreamsOptions, 'cell'>,
  ) {
    const byCell = new Map<string, RouteUpstreams>()
    for (const [name, targets] of cells.cells) byCell.set(name, new RouteUpstreams(targets, { ...deps, cell: name }))
    this.byCell = byCell
    this.own = own
    this.ownUrl = ownUrl
  }

  /** undici's Dispatcher.dispatch, through the cell's targets. */
  dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    this.dispatchAvoiding(options, handler, null)
    return true
  }

  /**
   * One attempt of a request, through its cell's targets only, to one other than `avoid` when the
   * cell has another (a retry, retry-call.ts); the target, or null for the route's one upstream.
   */
  dispatchAvoiding(
    options: Dispatcher.DispatchOptions,
    handler: Dispatcher.DispatchHandler,
    avoid: Target | null,
  ): Target | null {
    const cell = (options as DispatchOptions).headers[CELL_HEADER]
    const upstreams = typeof cell === 'string' ? this.byCell.get(cell) : this.own
    // Unreachable past the cell step; a bug here must not send the request to another cell.
    if (upstreams == null) throw new Error(`no targets for cell ${String(cell)}`)
    if (upstreams instanceof RouteUpstreams) return upstreams.dispatchAvoiding(options, handler, avoid)
    upstreams.dispatch(options, handler)
    return null
  }

  socketTarget(tenantId: string | undefined, cell: string | null): string {
    if (cell === null) {
      const own = this.own
      return own instanceof RouteUpstreams ? own.socketTarget(tenantId, null) : this.ownUrl
    }
    const upstreams = this.byCell.get(cell)
    if (upstreams === undefined) throw new Error(`no targets for cell ${cell}`)
    return upstreams.pickForSocket(tenantId).url
  }

  readTargets(): TargetReading[] {
    const readings = this.own instanceof RouteUpstreams ? this.own.readTargets() : []
    for (const upstreams of this.byCell.values()) readings.push(...upstreams.readTargets())
    return readings
  }

  readStates(): TargetStatus[] {
    const states = this.own instanceof RouteUpstreams ? this.own.readStates() : []
    for (const upstreams of this.byCell.values()) states.push(...upstreams.readStates())
    return states
  }

  /** Every target of one cell (or of the route's own) is out. */
  panic(): boolean {
    if (this.own instanceof RouteUpstreams && this.own.panic()) return true
    for (const upstreams of this.byCell.values()) if (upstreams.panic()) return true
    return false
  }

  async destroy(): Promise<void> {
    await Promise.all([this.own?.destroy(), ...[...this.byCell.values()].map((upstreams) => upstreams.destroy())])
  }
}

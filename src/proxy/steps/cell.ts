// The tenant's cell, on a route with cells (docs/api.md, Cells): the resolved sub-account's own
// placement, else its parent account's default, else the route's `default_cell`. A route with no
// targets for that cell refuses it (421 cell_not_served): a request is never served by another
// cell's targets, nor by the route's own. The cell goes upstream as X-Service-Cell (headers.ts)
// and into the request log. Before the limits: a refused request takes nothing.
import type { FastifyRequest } from 'fastify'
import { ApiError } from '../../errors.js'
import type { StepFactory } from '../options.js'
import type { Verdict } from '../pipeline.js'
import { cellOf, type RouteCells } from '../upstreams/route-cells.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The cell that serves the request (steps/cell.ts); null off a route with cells, or placed nowhere. */
    cell: string | null
  }
}

/** The 421 of a tenant whose cell the route has no targets for. */
export function cellNotServed(cell: string, route: string): ApiError {
  return new ApiError(
    'cell_not_served',
    `the route ${route} has no targets for the cell ${cell}, where this tenant is placed`,
    { extensions: { cell, route } },
  )
}

export const cellStep: StepFactory = (route, { lookups }) => {
  const cells: RouteCells | null = route.cells
  if (cells === null) return null
  const serve = (request: FastifyRequest, cell: string | null): Verdict => {
    if (cell === null) {
      // Placed nowhere, and no default cell: the route's own upstream or targets (route-cells.ts
      // requires them then).
      request.cell = null
      return undefined
    }
    if (!cells.cells.has(cell)) return cellNotServed(cell, route.prefix)
    request.cell = cell
    return undefined
  }
  return {
    name: 'cell',
    check(request) {
      const acting = request.actingTenant
      // A public route has no tenant: its default cell, or its own upstream.
      if (acting === null) return serve(request, cells.defaultCell)
      // A sub-account's own, or a parent account's (acting as itself: its default).
      if (acting.placement != null || acting.parentId === null)
        return serve(request, cellOf(acting, null, cells.defaultCell))
      const keyTenant = request.principal!.tenant
      if (keyTenant.id === acting.parentId) return serve(request, cellOf(acting, keyTenant, cells.defaultCell))
      // A sub-account's own key: its parent's record, through the caches, as the limits read it.
      return lookups.tenant(acting.parentId).then((parent) => serve(request, cellOf(acting, parent, cells.defaultCell)))
    },
  }
}

// A route's cells (docs/configuration.md, routes: `cells`, `default_cell`): named sets of targets,
// each balanced and watched as a route's `targets` are. A tenant's cell is its placement (its
// own, else its parent account's default, else the route's `default_cell`); its requests go to
// that cell's targets only (steps/cell.ts). Apart from route-options.ts, whose rules a cell reuses.
import { parseRouteTargets, type RouteTargets } from './route-options.js'

/** A cell's name, as a route table and a placement write it. */
export const CELL_NAME = /^[a-z][a-z0-9-]{0,31}$/
export const CELL_KEYS = ['cells', 'default_cell'] as const
export const MAX_CELLS = 32
const CELL_ENTRY_KEYS = new Set(['targets', 'balance', 'outlier', 'health_check'])

export interface RouteCells {
  /** By name, in the order the table lists them. */
  readonly cells: ReadonlyMap<string, RouteTargets>
  /** The cell of a tenant placed nowhere (and of a public route's requests); null: the route's own upstream or targets. */
  readonly defaultCell: string | null
  /** The route has `upstream` or `targets` beside its cells: they serve a request placed nowhere. */
  readonly ownUpstream: boolean
}

type Fail = (problem: string) => never
type ParseUrl = (value: unknown, field: string) => string

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * A route's `cells` and `default_cell`; null for a route without cells. `hasOwnUpstream`: the
 * route has `upstream` or `targets` beside them, which serve a tenant placed nowhere; without
 * them `default_cell` is required. Every cell's targets have the scheme and base path of
 * `baseUrl` when it is given (the route's own upstream), else of the first cell's first target.
 */
export function parseRouteCells(
  entry: Readonly<Record<string, unknown>>,
  isPublic: boolean,
  hasOwnUpstream: boolean,
  parseUrl: ParseUrl,
  fail: Fail,
): RouteCells | null {
  if (entry.cells === undefined) {
    if (entry.default_cell !== undefined) fail('default_cell needs cells (it names one of them)')
    return null
  }
  const given = entry.cells
  if (!isMapping(given) || Object.keys(given).length === 0 || Object.keys(given).length > MAX_CELLS)
    fail(`cells must be a mapping of 1 to ${MAX_CELLS} cell names to {targets, balance, outlier, health_check}`)
  const cells = new Map<string, RouteTargets>()
  for (const [name, cell] of Object.entries(given)) {
    if (!CELL_NAME.test(name))
      fail(`cells: "${name.slice(0, 40)}" is not a cell name: 1 to 32 of a-z, 0-9 and -, starting with a letter`)
    const field = `cells.${name}`
    if (!isMapping(cell)) fail(`${field} must be a mapping with targets`)
    for (const key of Object.keys(cell))
      if (!CELL_ENTRY_KEYS.has(key))
        fail(`${field}: unknown key "${key}" (allowed: ${[...CELL_ENTRY_KEYS].join(', ')})`)
    if (cell.targets === undefined) fail(`${field}.targets is required: a list of {url, weight}`)
    const targets = parseRouteTargets(
      cell,
      isPublic,
      (value, inner) => parseUrl(value, `${field}.${inner}`),
      (problem) => fail(`${field}.${problem}`),
    )
    cells.set(name, targets!)
  }
  const defaultCell = entry.default_cell ?? null
  if (defaultCell !== null && (typeof defaultCell !== 'string' || !cells.has(defaultCell)))
    fail(`default_cell must name one of cells (${[...cells.keys()].join(', ')})`)
  if (defaultCell === null && !hasOwnUpstream)
    fail('a route with cells and neither upstream nor targets needs default_cell: the cell of a tenant placed nowhere')
  return Object.freeze({ cells, defaultCell, ownUpstream: hasOwnUpstream })
}

/**
 * Checks that every cell's targets have the scheme and base path of `base` (the route's upstream):
 * the path rewrite, the answers' Location and a WebSocket's URL are the route's, whichever cell serves.
 */
export function checkCellBase(cells: RouteCells, base: string, fail: Fail): void {
  const first = new URL(base)
  for (const [name, cell] of cells.cells)
    cell.targets.forEach((target, index) => {
      const url = new URL(target.url)
      if (url.protocol !== first.protocol || url.pathname !== first.pathname)
        fail(
          `cells.${name}.targets[${index}].url must have the scheme and base path of the route's other targets (${first.protocol}//…${first.pathname})`,
        )
    })
}

/**
 * A tenant's cell on a route whose default cell is `defaultCell`: `acting`'s own placement, else
 * its parent account's (`parent`: its record, null for a parent account or none found), else the
 * route's. A parent account acting as itself has its own placement: its default.
 */
export function cellOf(
  acting: { readonly placement?: string | null },
  parent: { readonly placement?: string | null } | null,
  defaultCell: string | null,
): string | null {
  return acting.placement ?? parent?.placement ?? defaultCell
}

/** Every target URL of a route's cells. */
export function cellTargetUrls(cells: RouteCells | null): string[] {
  if (cells === null) return []
  return [...cells.cells.values()].flatMap((cell) => cell.targets.map((target) => target.url))
}

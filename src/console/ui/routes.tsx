// Routes: what the gateway proxies, as the page it came in lists them (console/page.ts): each
// prefix, the scopes a key needs to read and to write there, whether it carries WebSockets, with
// their bounds, and which other origins' pages may call it from a browser. Then, from the API
// (GET /routes, read when the screen opens and on Refresh), each route's targets and their state
// on the replica that answered, and whether the route is in panic. Never an upstream's address: a
// target is named by its place among the route's targets.
import { useEffect, useState } from 'preact/hooks'
import type { ConsoleRoute } from '../route-list.js'
import { api } from './api.js'
import { Empty, ErrorMessage, formatTime, useAction } from './components.js'
import type { RouteStatus } from './types.js'

/**
 * The id of route-list.ts's CONSOLE_ROUTES_ELEMENT, spelled here because the bundle takes nothing
 * from the server's modules but their types (console.test.ts fails if they part).
 */
const ROUTES_ELEMENT = 'gateway-routes'

/** The routes the page was served with; none when the block is missing or not a list. */
export function servedRoutes(): ConsoleRoute[] {
  const text = document.getElementById(ROUTES_ELEMENT)?.textContent ?? '[]'
  try {
    const parsed: unknown = JSON.parse(text)
    return Array.isArray(parsed) ? (parsed as ConsoleRoute[]) : []
  } catch {
    return []
  }
}

type Target = RouteStatus['targets'][number]

const STATE_TEXT: Record<Target['state'], string> = {
  up: 'up',
  ejected: 'ejected (failed requests in a row; tried again after its back-off)',
  failing_checks: 'failing its health checks',
}

function scopeList(scopes: readonly string[], isPublic: boolean): string {
  if (isPublic) return 'none (public)'
  return scopes.length === 0 ? 'any key' : scopes.join(', ')
}

function seconds(ms: number): string {
  return ms % 60_000 === 0 ? `${ms / 60_000} min` : `${ms / 1000} s`
}

function bytes(n: number): string {
  return n % (1024 * 1024) === 0 ? `${n / (1024 * 1024)} MiB` : n % 1024 === 0 ? `${n / 1024} KiB` : `${n} bytes`
}

function browsers(cors: ConsoleRoute['cors']): string {
  if (cors == null) return 'Same origin only'
  return cors.origins[0] === '*' ? 'Pages of any origin' : `Pages of ${cors.origins.join(', ')}`
}

/** Whether the gateway decides for a proxy in front of it on this route (AUTHZ_PORT), said under its prefix. */
function decidedFor(route: ConsoleRoute): string | null {
  if (route.decided === 'only') return 'Decided for a proxy in front only: the gateway does not proxy it'
  if (route.decided === 'also') return 'Also decided for a proxy in front (forward authorization)'
  return null
}

/**
 * A route's targets by cell, in the order they come: one group without a heading while no route
 * has cells (every target's `cell` null); with cells, a group per cell, headed by its name.
 */
function byCell(targets: readonly Target[]): [string | null, Target[]][] {
  const groups = new Map<string | null, Target[]>()
  for (const target of targets) {
    const group = groups.get(target.cell)
    if (group === undefined) groups.set(target.cell, [target])
    else group.push(target)
  }
  return [...groups]
}

function Targets({ status, failed }: { status: RouteStatus | undefined; failed: boolean }) {
  if (status === undefined) return <>{failed ? 'Not known (the list did not load)' : 'Loading…'}</>
  if (status.balance === 'upstream') return <>One upstream (not watched)</>
  return (
    <div data-testid={`targets ${status.prefix}`}>
      {status.panic && (
        <p data-testid="panic">
          <span class="badge revoked">Panic</span> every target is out, so requests go to all of them.
        </p>
      )}
      {byCell(status.targets).map(([cell, targets]) => (
        <div key={cell ?? ''}>
          {cell !== null && <p>Cell {cell}</p>}
          <ul class="plain">
            {targets.map((target) => (
              <li key={target.position} data-state={target.state} class={target.state === 'up' ? undefined : 'bad'}>
                Target {target.position} (weight {target.weight}): {STATE_TEXT[target.state]}
              </li>
            ))}
          </ul>
        </div>
      ))}
      <p class="hint">
        {status.balance === 'cells'
          ? 'Each cell balances its own targets'
          : `Balanced by ${status.balance.replace('_', ' ')}`}
      </p>
    </div>
  )
}

export function RoutesScreen() {
  const routes = servedRoutes()
  const [statuses, setStatuses] = useState<{ byPrefix: Map<string, RouteStatus>; at: Date } | null>(null)
  const [refreshes, setRefreshes] = useState(0)
  const load = useAction()
  useEffect(() => {
    load.run(async (current) => {
      const answer = await api<{ data: RouteStatus[] }>('GET', '/routes')
      if (!current()) return
      setStatuses({ byPrefix: new Map(answer.data.map((route) => [route.prefix, route])), at: new Date() })
    })
  }, [refreshes])

  return (
    <section aria-labelledby="routes-title">
      <h1 id="routes-title">Routes</h1>
      <p>
        What this gateway proxies, by path prefix: the scopes a key needs, which routes carry WebSockets (a browser
        sends its key as the subprotocol <code>tgw.bearer.&lt;key&gt;</code>), which other origins' pages may call a
        route from a browser, and the state of each route's targets on the gateway replica that answered.
      </p>
      <p>
        <button type="button" onClick={() => setRefreshes((n) => n + 1)} disabled={load.busy}>
          Refresh the targets' state
        </button>{' '}
        {statuses !== null && <span data-testid="routes-read-at">Read at {formatTime(statuses.at.toISOString())}</span>}
      </p>
      {load.error !== null && <ErrorMessage error={load.error} />}
      {routes.length === 0 ? (
        <Empty>This gateway proxies no route.</Empty>
      ) : (
        <div class="table-wrap">
          {/* Cards under 600 px, as every table of the console: no region scrolls sideways on a phone. */}
          <table class="cards" data-testid="routes">
            <caption class="visually-hidden">Proxied routes</caption>
            <thead>
              <tr>
                <th scope="col">Prefix</th>
                <th scope="col">Read scopes</th>
                <th scope="col">Write scopes</th>
                <th scope="col">WebSockets</th>
                <th scope="col">Browsers on other origins</th>
                <th scope="col">Targets</th>
              </tr>
            </thead>
            <tbody>
              {routes.map((route) => (
                <tr key={route.prefix}>
                  <td data-label="Prefix">
                    <code>{route.prefix}</code>
                    {decidedFor(route) !== null && <p class="hint">{decidedFor(route)}</p>}
                  </td>
                  <td data-label="Read scopes">{scopeList(route.scopes.read, route.public)}</td>
                  <td data-label="Write scopes">{scopeList(route.scopes.write, route.public)}</td>
                  <td data-label="WebSockets">
                    {route.websocket === null
                      ? 'No'
                      : `Yes: up to ${route.websocket.maxPerTenant} per tenant and ${route.websocket.maxPerAccount} per parent account, closed after ${seconds(route.websocket.idleTimeoutMs)} idle, messages up to ${bytes(route.websocket.maxMessageBytes)}`}
                  </td>
                  <td data-label="Browsers on other origins">{browsers(route.cors)}</td>
                  <td data-label="Targets">
                    <Targets status={statuses?.byPrefix.get(route.prefix)} failed={load.error !== null} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  )
}

// Routes: what the gateway proxies, as the page it came in lists them (console/page.ts): each
// prefix, the scopes a key needs to read and to write there, and whether it carries WebSockets,
// with their bounds. Never an upstream's address.
import type { ConsoleRoute } from '../route-list.js'
import { Empty } from './components.js'

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

export function RoutesScreen() {
  const routes = servedRoutes()
  return (
    <section aria-labelledby="routes-title">
      <h1 id="routes-title">Routes</h1>
      <p>
        What this gateway proxies, by path prefix: the scopes a key needs, and which routes carry WebSockets (a browser
        sends its key as the subprotocol <code>tgw.bearer.&lt;key&gt;</code>).
      </p>
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
              </tr>
            </thead>
            <tbody>
              {routes.map((route) => (
                <tr key={route.prefix}>
                  <td data-label="Prefix">
                    <code>{route.prefix}</code>
                  </td>
                  <td data-label="Read scopes">{scopeList(route.scopes.read, route.public)}</td>
                  <td data-label="Write scopes">{scopeList(route.scopes.write, route.public)}</td>
                  <td data-label="WebSockets">
                    {route.websocket === null
                      ? 'No'
                      : `Yes: up to ${route.websocket.maxPerTenant} per tenant and ${route.websocket.maxPerAccount} per parent account, closed after ${seconds(route.websocket.idleTimeoutMs)} idle, messages up to ${bytes(route.websocket.maxMessageBytes)}`}
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

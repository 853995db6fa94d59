// The proxied routes as the console lists them (the Routes screen): written into the page by the
// server (console/page.ts), read by the browser (console/ui/routes.tsx). Nothing of node here.

/** The id of the page's JSON data block. */
export const CONSOLE_ROUTES_ELEMENT = 'gateway-routes'

/** What the console shows of a proxied route: never its upstream, which is the operator's business. */
export interface ConsoleRoute {
  readonly prefix: string
  readonly public: boolean
  readonly scopes: { readonly read: readonly string[]; readonly write: readonly string[] }
  /** WebSockets carried, and their bounds; null: none. */
  readonly websocket: {
    readonly maxPerTenant: number
    /** Sockets of one parent account, its sub-accounts' included (the default resolved). */
    readonly maxPerAccount: number
    readonly idleTimeoutMs: number
    readonly maxMessageBytes: number
  } | null
  /** The origins whose pages may call it from a browser (`["*"]`: any); null: none (no `cors`). */
  readonly cors: { readonly origins: readonly string[] } | null
  /**
   * Forward authorization (AUTHZ_PORT): `only` for a route without an upstream, decided for a
   * proxy in front and never proxied; `also` for a proxied route while AUTHZ_PORT is set; null
   * while it is not.
   */
  readonly decided: 'only' | 'also' | null
}

/** The id of the page's JSON data block holding TRACE_URL_TEMPLATE (null when unset). */
export const CONSOLE_TRACE_URL_ELEMENT = 'gateway-trace-url'

/** The list as JSON safe inside a <script> element: no `<`, so no `</script>` or `<!--`. */
export function routesForScript(routes: readonly ConsoleRoute[]): string {
  return jsonForScript(routes)
}

/** Any value as JSON safe inside a <script> element. */
export function jsonForScript(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c')
}

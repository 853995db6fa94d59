// The web console (docs/console.md): GET /console, a page that calls the management API from the
// browser with the key its user pastes, and its two assets. Registered only when CONSOLE=on.
// The page runs no inline code and loads nothing from another origin: the policy below says so.
import { negotiate } from '@fastify/accept-negotiator'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { routeNotFound } from '../errors.js'
import { pathOf } from '../http/bad-paths.js'
import { type Asset, type ConsoleAssets, consoleAssets, served } from './assets.js'
import { consolePage } from './page.js'
import type { ConsoleRoute } from './route-list.js'
import { CONSOLE_ASSETS, CONSOLE_PREFIX } from '../shared/paths.js'

/**
 * Same origin only: scripts, styles, fetches; no inline code, no frames of it, no base tag.
 * `img-src data:` is for the page's empty `data:,` icon only, which keeps browsers from asking
 * for /favicon.ico (a path the proxy may take). Trusted Types with no policy: the console builds
 * no markup from strings, and a sink that would (innerHTML, document.write) throws instead.
 */
export const CONSOLE_CSP =
  "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
  "require-trusted-types-for 'script'; trusted-types 'none'"

export interface ConsoleOptions {
  /** Where the assets come from (default: prebuilt, else bundled once per process). */
  assets?: () => Promise<ConsoleAssets>
  /** The proxied routes the page lists (prefix, scopes, WebSockets). */
  routes?: readonly ConsoleRoute[]
  /** TRACE_URL_TEMPLATE: a request's trace id links to its trace; null or absent: shown alone. */
  traceUrlTemplate?: string | null
}

function secureHeaders(reply: FastifyReply): FastifyReply {
  return reply
    .header('content-security-policy', CONSOLE_CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('cross-origin-opener-policy', 'same-origin')
}

/** gzip when the client takes it: `gzip;q=0` (or `*;q=0`) is a refusal, not a request. */
export function acceptsGzip(request: FastifyRequest): boolean {
  const accepted = request.headers['accept-encoding']
  return typeof accepted === 'string' && negotiate(accepted, ['gzip', 'identity']) === 'gzip'
}

/** A body with its validator: 304 when the client has it, gzip when it takes it. */
export function sendCached(request: FastifyRequest, reply: FastifyReply, body: Buffer, gzip: Buffer, etag: string) {
  reply.header('etag', etag).header('vary', 'accept-encoding')
  if (request.headers['if-none-match'] === etag) return reply.code(304).send()
  if (acceptsGzip(request)) return reply.header('content-encoding', 'gzip').send(gzip)
  return reply.send(body)
}

/**
 * A page's other spelling sent to the page (`308`, the query kept), kept by no browser: a `308`
 * is cached by default, and the path may later be an upstream's (`CONSOLE=off`).
 */
export function redirectToPage(request: FastifyRequest, reply: FastifyReply, page: string, cacheControl: string) {
  const query = request.url.indexOf('?')
  return reply
    .header('cache-control', cacheControl)
    .redirect(`${page}${query === -1 ? '' : request.url.slice(query)}`, 308)
}

export const consolePlugin: FastifyPluginAsync<ConsoleOptions> = async (app, options) => {
  const assets = options.assets ?? consoleAssets
  const routes = options.routes ?? []
  // The page names the assets by their hashes; it is made once per set of assets.
  let page: ({ for: ConsoleAssets } & ReturnType<typeof served>) | undefined
  const pageFor = (current: ConsoleAssets) => {
    if (page?.for !== current)
      page = { for: current, ...served(Buffer.from(consolePage(current, routes, options.traceUrlTemplate ?? null))) }
    return page
  }

  const hidden = { schema: { hide: true } }
  app.get(CONSOLE_PREFIX, hidden, async (request, reply) => {
    const { body, gzip, etag } = pageFor(await assets())
    // Revalidated on every load: a new gateway may link new assets.
    secureHeaders(reply).type('text/html; charset=utf-8').header('cache-control', 'no-cache')
    return sendCached(request, reply, body, gzip, etag)
  })

  // The page's path has no trailing slash; typed or linked with one, it is sent there.
  app.get(`${CONSOLE_PREFIX}/`, hidden, async (request, reply) =>
    redirectToPage(request, reply, CONSOLE_PREFIX, 'no-cache'),
  )

  app.get<{ Params: { name: string } }>(`${CONSOLE_ASSETS}/:name`, hidden, async (request, reply) => {
    const current = await assets()
    const found: Asset | undefined = [current.script, current.style].find((a) => a.name === request.params.name)
    if (found === undefined) throw routeNotFound(request.method, pathOf(request.url))
    secureHeaders(reply).type(found.type).header('cache-control', 'public, max-age=31536000, immutable')
    return sendCached(request, reply, found.body, found.gzip, found.etag)
  })
}

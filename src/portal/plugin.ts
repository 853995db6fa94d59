// The sub-account portal (docs/api.md, Portal sessions; docs/portal.md): its page at /portal/, its
// script and stylesheet under /portal/assets, and its API under /portal/api, served with the
// console (CONSOLE=on). The page's Content-Security-Policy is the
// console's, but for `frame-ancestors`: the embedding page's origin, named by its Referer, when a
// parent allows it (portal_origins, set by the operator), `'none'` otherwise: the link's token is
// in the fragment, which never reaches the gateway (links of the earlier shape name their session).
import type { Alerts } from '../alerts/plugin.js'
import type { FastifyPluginAsync, FastifyReply } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { type Asset, type ConsoleAssets, portalAssets, served } from '../console/assets.js'
import { routeNotFound } from '../errors.js'
import { pathOf } from '../proxy/paths.js'
import type { CacheInvalidator } from '../cache/index.js'
import type { Rate } from '../limits/bucket.js'
import type { Limiter } from '../limits/limiter.js'
import { managementRate } from '../limits/management-rate.js'
import { CONSOLE_CSP, redirectToPage, sendCached } from '../console/plugin.js'
import { type Sql, withDeadline } from '../store/db.js'
import { isPortalOrigin, portalOriginsOfSession } from '../store/portal-sessions.js'
import { cursorSecret } from '../store/secrets.js'
import { isUuid } from '../tenancy/identifiers.js'
import { addManagementDeadline, MANAGEMENT_DEADLINE_MS } from '../management/hooks.js'
import { Cursors } from '../management/paging.js'
import { registerPortalApiRoutes } from './api-routes.js'
import { registerExchangeRoutes } from './exchange-routes.js'
import { portalPage } from './page.js'
import { PORTAL_API, PORTAL_ASSETS, PORTAL_PREFIX } from './paths.js'
import { sessionAuth, sessionOf } from './session-auth.js'
import type { RequestLogReader } from '../management/log-reads.js'

export interface PortalOptions {
  sql: Sql
  cache: CacheInvalidator
  /** The request log's reader, the management API's own; null when the log is off. */
  requestLog: RequestLogReader | null
  /** Told the end of each key minted or rolled (the alerts'). */
  keyMinted: Alerts['keyMinted']
  /** ISSUER_URL: the links' origin; https there makes the session cookie Secure. */
  issuerUrl: string
  /** The portal's calls spend their parent's MANAGEMENT_RATE, as its own management calls do. */
  limiter: Limiter
  rate: Rate
  /** Where the page's script and stylesheet come from (default: prebuilt, else bundled once per process). */
  assets?: () => Promise<ConsoleAssets>
}

/** The console's policy with the parent's embedders as `frame-ancestors` (each a checked https origin). */
export function portalCsp(origins: readonly string[] | null): string {
  const ancestors = origins === null || origins.length === 0 ? "'none'" : origins.join(' ')
  return CONSOLE_CSP.replace("frame-ancestors 'none'", `frame-ancestors ${ancestors}`)
}

/**
 * The https origin of the page that frames the portal, from its Referer; null for none. The link
 * (`/portal/#<token>`) names no session the server can see: a frame's request names its embedder
 * only by Referer, which browsers send cross-origin as the origin alone unless the embedder
 * forbids it (docs/api.md, Portal sessions).
 */
function embedderOf(referer: string | undefined): string | null {
  if (referer === undefined || !referer.startsWith('https://')) return null
  try {
    const origin = new URL(referer).origin
    return origin === 'null' ? null : origin
  } catch {
    return null
  }
}

/**
 * The origins that may frame the page: a link of the earlier shape names its session in the query,
 * whose parent's portal origins may; else the embedder its Referer names, if an active parent
 * lists it. Null: none may.
 */
async function allowedAncestors(sql: Sql, session: unknown, referer: string | undefined): Promise<string[] | null> {
  if (typeof session === 'string' && isUuid(session)) return portalOriginsOfSession(sql, session)
  const embedder = embedderOf(referer)
  if (embedder === null) return null
  return (await isPortalOrigin(sql, embedder)) ? [embedder] : null
}

function secureHeaders(reply: FastifyReply, csp: string): FastifyReply {
  return reply
    .header('content-security-policy', csp)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
}

export const portalPlugin: FastifyPluginAsync<PortalOptions> = async (plugin, options) => {
  const { sql } = options
  const assets = options.assets ?? portalAssets
  const app = plugin.withTypeProvider<TypeBoxTypeProvider>()
  app.decorateRequest('portalSession', null)
  // The page names the assets by their hashes; it is made once per set of assets.
  let page: ({ for: ConsoleAssets } & ReturnType<typeof served>) | undefined
  const pageFor = (current: ConsoleAssets) => {
    if (page?.for !== current) page = { for: current, ...served(Buffer.from(portalPage(current))) }
    return page
  }

  app.get<{ Querystring: { session?: unknown } }>(
    `${PORTAL_PREFIX}/`,
    { schema: { hide: true } },
    async (request, reply) => {
      // Postgres slow or away: the page still loads, and no one may frame it (the safe side).
      const origins = await withDeadline(
        allowedAncestors(sql, request.query.session, request.headers.referer),
        MANAGEMENT_DEADLINE_MS,
      ).catch(() => null)
      // Framed by the parent's pages only; revalidated on every load, never stored elsewhere.
      const { body, gzip, etag } = pageFor(await assets())
      secureHeaders(reply, portalCsp(origins)).type('text/html; charset=utf-8').header('cache-control', 'no-store')
      return sendCached(request, reply, body, gzip, etag)
    },
  )

  // The script and stylesheet: named by their hashes, cached for good; never framed themselves.
  app.get<{ Params: { name: string } }>(
    `${PORTAL_ASSETS}/:name`,
    { schema: { hide: true } },
    async (request, reply) => {
      const current = await assets()
      const found: Asset | undefined = [current.script, current.style].find((a) => a.name === request.params.name)
      if (found === undefined) throw routeNotFound(request.method, pathOf(request.url))
      secureHeaders(reply, portalCsp(null))
        .type(found.type)
        .header('cache-control', 'public, max-age=31536000, immutable')
      return sendCached(request, reply, found.body, found.gzip, found.etag)
    },
  )

  // The link's path is /portal/; without its slash, the page's relative URLs would resolve above it.
  // no-store, as the page: an old link's query names a session.
  app.get(PORTAL_PREFIX, { schema: { hide: true } }, async (request, reply) =>
    redirectToPage(request, reply, `${PORTAL_PREFIX}/`, 'no-store'),
  )

  await app.register(
    async (api) => {
      const typed = api.withTypeProvider<TypeBoxTypeProvider>()
      // The management API's deadlines: past 1.5 s of store work a call is 503 store_unavailable
      // rather than hanging on a partitioned Postgres, and a body must arrive within 10 s.
      addManagementDeadline(api)
      // JSON only, never framed, never stored.
      typed.addHook('onRequest', async (_request, reply) => {
        secureHeaders(reply, portalCsp(null)).header('cache-control', 'no-store')
      })
      registerExchangeRoutes(typed, sql, options.issuerUrl)
      await typed.register(async (authed) => {
        const withSession = authed.withTypeProvider<TypeBoxTypeProvider>()
        withSession.addHook('onRequest', sessionAuth(sql))
        withSession.addHook(
          'onRequest',
          managementRate(options.limiter, options.rate, (r) => sessionOf(r).account_id),
        )
        registerPortalApiRoutes(withSession, {
          sql,
          cache: options.cache,
          cursors: new Cursors(() => cursorSecret(sql)),
          requestLog: options.requestLog,
          keyMinted: options.keyMinted,
        })
      })
    },
    { prefix: PORTAL_API },
  )
}

// The sub-account portal (docs/api.md, Portal sessions; docs/portal.md): its page at /portal/, its
// script and stylesheet under /portal/assets, and its API under /portal/api, served with the
// console (CONSOLE=on). The page's Content-Security-Policy is the console's, `frame-ancestors`
// included ('none'), but for a browser loading it into a frame: then any https page may show it,
// since the document is served before anyone knows whose link it holds (the token is in the
// fragment), and the exchange gives a session only in a page framed by the link's parent's
// `portal_origins` (exchange-routes.ts). Nothing a request says (Referer, query) changes the policy.
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { type Asset, type ConsoleAssets, portalAssets, served } from '../console/assets.js'
import { routeNotFound } from '../errors.js'
import { pathOf } from '../http/bad-paths.js'
import type { Rate } from '../limits/bucket.js'
import { managementRate } from '../limits/management-rate.js'
import { CONSOLE_CSP, redirectToPage, sendCached } from '../console/plugin.js'
import type { Sql } from '../store/db.js'
import { storeDeadlinesOf } from '../store/deadlines.js'
import { cursorSecret } from '../store/secrets.js'
import { addManagementDeadline, refuseUnknownQuery } from '../management/hooks.js'
import { Cursors } from '../management/paging.js'
import { registerPortalApiRoutes } from './api-routes.js'
import { PortalCredentialLookups } from './credential-lookups.js'
import { registerExchangeRoutes } from './exchange-routes.js'
import { portalPage } from './page.js'
import { PORTAL_API, PORTAL_ASSETS, PORTAL_PREFIX } from '../shared/paths.js'
import { sessionAuth, sessionOf } from './session-auth.js'
import type { RequestLogReader } from '../management/log-reads.js'

export interface PortalOptions {
  sql: Sql
  /**
   * The main pool as the handlers use it: their statements are cancelled when their call is
   * answered 503 at its store deadline (management/hooks.ts); `sql` when none.
   */
  callSql?: Sql
  /** The request log's reader, the management API's own; null when the log is off. */
  requestLog: RequestLogReader | null
  /** ISSUER_URL: the links' origin; https there makes the session cookie Secure. */
  issuerUrl: string
  /** The portal's calls spend their parent's MANAGEMENT_RATE (app.limiter), as its own management calls do. */
  rate: Rate
  /** Where the page's script and stylesheet come from (default: prebuilt, else bundled once per process). */
  assets?: () => Promise<ConsoleAssets>
}

/** The console's policy with `frame-ancestors` these sources (none: 'none'). */
export function portalCsp(sources: readonly string[] | null): string {
  const ancestors = sources === null || sources.length === 0 ? "'none'" : sources.join(' ')
  return CONSOLE_CSP.replace("frame-ancestors 'none'", `frame-ancestors ${ancestors}`)
}

/**
 * Who may frame the page: no one, unless the browser says it loads it into a frame (Fetch
 * Metadata, which no page can set); then any https page, because the response cannot know the
 * link's parent. The frame's page gets no session unless its ancestors are that parent's.
 */
const PAGE_CSP = portalCsp(null)
const FRAMED_PAGE_CSP = portalCsp(['https:'])
const pageCsp = (request: FastifyRequest) => {
  const destination = request.headers['sec-fetch-dest']
  return destination === 'iframe' || destination === 'frame' ? FRAMED_PAGE_CSP : PAGE_CSP
}

function secureHeaders(reply: FastifyReply, csp: string): FastifyReply {
  return reply
    .header('content-security-policy', csp)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('cross-origin-opener-policy', 'same-origin')
}

type PortalApp = Parameters<FastifyPluginAsync>[0]

/** The page at /portal/ (its policy by Sec-Fetch-Dest), its hashed script and stylesheet, and /portal's redirect. */
function registerPortalPage(plugin: PortalApp, assets: () => Promise<ConsoleAssets>): void {
  // The page names the assets by their hashes; it is made once per set of assets.
  let page: ({ for: ConsoleAssets } & ReturnType<typeof served>) | undefined
  const pageFor = (current: ConsoleAssets) => {
    if (page?.for !== current) page = { for: current, ...served(Buffer.from(portalPage(current))) }
    return page
  }

  plugin.get(`${PORTAL_PREFIX}/`, { schema: { hide: true } }, async (request, reply) => {
    const { body, gzip, etag } = pageFor(await assets())
    // No cache keeps it: the policy depends on Sec-Fetch-Dest.
    secureHeaders(reply, pageCsp(request)).type('text/html; charset=utf-8').header('cache-control', 'no-store')
    return sendCached(request, reply, body, gzip, etag)
  })

  // The script and stylesheet: named by their hashes, cached for good; never framed themselves.
  plugin.get<{ Params: { name: string } }>(
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
  plugin.get(PORTAL_PREFIX, { schema: { hide: true } }, async (request, reply) =>
    redirectToPage(request, reply, `${PORTAL_PREFIX}/`, 'no-store'),
  )
}

/** The API under /portal/api: the exchange, then the calls of a session, at its parent's management rate. */
async function registerPortalApi(api: PortalApp, options: PortalOptions, lookups: PortalCredentialLookups) {
  const { sql } = options
  // The handlers' statements stop when their call is answered 503 (management/hooks.ts).
  const callSql = options.callSql ?? sql
  const { tenancyCache: cache, limiter, alerts } = api
  const typed = api.withTypeProvider<TypeBoxTypeProvider>()
  // The management API's deadlines: past 1.5 s of store work a call is 503 store_unavailable
  // rather than hanging on a partitioned Postgres, and a body must arrive within 10 s.
  addManagementDeadline(api)
  // A query its route does not take is refused, as on the management API (before any route is added).
  api.addHook('onRoute', refuseUnknownQuery)
  // JSON only, never framed, never stored.
  typed.addHook('onRequest', async (_request, reply) => {
    secureHeaders(reply, portalCsp(null)).header('cache-control', 'no-store')
  })
  registerExchangeRoutes(typed, callSql, lookups, options.issuerUrl)
  await typed.register(async (authed) => {
    const withSession = authed.withTypeProvider<TypeBoxTypeProvider>()
    withSession.addHook('onRequest', sessionAuth(lookups))
    withSession.addHook(
      'onRequest',
      managementRate(limiter, options.rate, (r) => sessionOf(r).account_id),
    )
    registerPortalApiRoutes(withSession, {
      sql: callSql,
      cache,
      // The plain pool: the secret, read once, serves every call, whichever was first.
      cursors: new Cursors(() => cursorSecret(sql)),
      requestLog: options.requestLog,
      keyMinted: alerts.keyMinted,
    })
  })
}

/**
 * Reads what it needs of the app from the decorations it depends on: the cache it tells of
 * changes, the limiter, the alerts told of each key minted, the metrics its credential lookups count in.
 */
const portal: FastifyPluginAsync<PortalOptions> = async (plugin, options) => {
  const { metrics } = plugin
  const lookups = new PortalCredentialLookups(
    options.sql,
    {
      query: () => metrics.cache.storeLookups.postgres.inc(),
      credentials: (n) => metrics.cache.postgresPortalCredentials.inc(n),
    },
    storeDeadlinesOf(plugin),
  )
  plugin.decorateRequest('portalSession', null)
  registerPortalPage(plugin, options.assets ?? portalAssets)
  await plugin.register((api) => registerPortalApi(api, options, lookups), { prefix: PORTAL_API })
}

/** Encapsulated (its request decoration and hooks stay inside), with the decorations it reads checked at registration. */
export const portalPlugin = fp(portal, {
  name: 'portal',
  encapsulate: true,
  dependencies: ['tenancy-cache', 'limits', 'alerts', 'metrics'],
})

// The sub-account portal (docs/api.md, Portal sessions): its page at /portal/ and its API under
// /portal/api, served with the console (CONSOLE=on). The page's Content-Security-Policy is the
// console's, but for `frame-ancestors`: the origins its parent allows to embed it (portal_origins,
// set by the operator), `'none'` otherwise. The link names its session in the query (the token is
// in the fragment, which never reaches the gateway), so the page knows whose origins to allow.
import type { FastifyPluginAsync, FastifyReply } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { CacheInvalidator } from '../cache/index.js'
import type { Rate } from '../limits/bucket.js'
import type { Limiter } from '../limits/limiter.js'
import { managementRate } from '../limits/management-rate.js'
import { CONSOLE_CSP } from '../console/plugin.js'
import { type Sql, withDeadline } from '../store/db.js'
import { portalOriginsOfSession } from '../store/portal-sessions.js'
import { cursorSecret } from '../store/secrets.js'
import { isUuid } from '../tenancy/identifiers.js'
import { addManagementDeadline, MANAGEMENT_DEADLINE_MS } from '../management/hooks.js'
import { Cursors } from '../management/paging.js'
import { registerPortalApiRoutes } from './api-routes.js'
import { registerExchangeRoutes } from './exchange-routes.js'
import { PORTAL_API, PORTAL_PREFIX } from './paths.js'
import { sessionAuth, sessionOf } from './session-auth.js'

export interface PortalOptions {
  sql: Sql
  cache: CacheInvalidator
  /** Where the request log is kept; null when it is off. */
  requestLogSql: Sql | null
  /** ISSUER_URL: the links' origin; https there makes the session cookie Secure. */
  issuerUrl: string
  /** The portal's calls spend their parent's MANAGEMENT_RATE, as its own management calls do. */
  limiter: Limiter
  rate: Rate
}

/** The console's policy with the parent's embedders as `frame-ancestors` (each a checked https origin). */
export function portalCsp(origins: readonly string[] | null): string {
  const ancestors = origins === null || origins.length === 0 ? "'none'" : origins.join(' ')
  return CONSOLE_CSP.replace("frame-ancestors 'none'", `frame-ancestors ${ancestors}`)
}

function secureHeaders(reply: FastifyReply, csp: string): FastifyReply {
  return reply
    .header('content-security-policy', csp)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
}

// The page itself is to come (issue 34, second part): for now a shell that says so, under the
// headers the page will have.
const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Account portal</title>
<link rel="icon" href="data:,">
</head>
<body>
<main><h1>Account portal</h1><p>The portal page is not available on this gateway yet.</p></main>
</body>
</html>
`

export const portalPlugin: FastifyPluginAsync<PortalOptions> = async (plugin, options) => {
  const { sql } = options
  const app = plugin.withTypeProvider<TypeBoxTypeProvider>()
  app.decorateRequest('portalSession', null)

  app.get<{ Querystring: { session?: unknown } }>(
    `${PORTAL_PREFIX}/`,
    { schema: { hide: true } },
    async (request, reply) => {
      const session = request.query.session
      // Postgres slow or away: the page still loads, and no one may frame it (the safe side).
      const origins =
        typeof session === 'string' && isUuid(session)
          ? await withDeadline(portalOriginsOfSession(sql, session), MANAGEMENT_DEADLINE_MS).catch(() => null)
          : null
      // Framed by the parent's pages only; revalidated on every load, never stored elsewhere.
      secureHeaders(reply, portalCsp(origins)).type('text/html; charset=utf-8').header('cache-control', 'no-store')
      return PAGE
    },
  )

  // The link's path is /portal/; without its slash, the page's relative URLs would resolve above it.
  app.get(PORTAL_PREFIX, { schema: { hide: true } }, async (request, reply) => {
    const query = request.url.indexOf('?')
    return reply.redirect(`${PORTAL_PREFIX}/${query === -1 ? '' : request.url.slice(query)}`, 308)
  })

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
          requestLogSql: options.requestLogSql,
        })
      })
    },
    { prefix: PORTAL_API },
  )
}

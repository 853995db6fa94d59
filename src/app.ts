// buildApp: the Fastify options and the registrations, in order; it never listens (the process
// lives in main.ts). What it is given is in app-deps.ts, the server's limits in
// http/server-limits.ts. docs/internals.md follows a request through what is registered here.
import Fastify, { type FastifyInstance } from 'fastify'
import type { AppDeps } from './app-deps.js'
import {
  accessTokens,
  accountingOptions,
  alertsOptions,
  cacheOptions,
  credentialOptions,
  eventRetentionOptions,
  healthOptions,
  limitsOptions,
  metricsOptions,
  requestLogOptions,
  signingKeysOptions,
  tracesOptions,
  usageMeterOptions,
  webhookDeliveryOptions,
} from './app-options.js'
import { proxyOptions } from './app-proxy-options.js'
import {
  consoleOptions,
  managementOptions,
  oauthOptions,
  portalOptions,
  requestLogReader,
  secretScanningOptions,
} from './app-surface-options.js'
import { checkDeps, configureServer, fastifyOptions } from './app-server.js'
import type { AccessTokens } from './auth/access-tokens.js'
import { tenancyCachePlugin } from './cache/plugin.js'
import { consolePlugin } from './console/plugin.js'
import { eventRetentionPlugin } from './events/retention-plugin.js'
import { sendError } from './http/error-handler.js'
import { requestGuards } from './http/guards.js'
import { parsing } from './http/parsing.js'
import { routeKinds } from './http/route-kind.js'
import { limitsPlugin } from './limits/plugin.js'
import { alertsPlugin } from './alerts/plugin.js'
import { managementRoutes } from './management/routes.js'
import { credentialRoutes } from './oauth/jwks.js'
import { oauthRoutes } from './oauth/routes.js'
import { healthRoutes } from './ops/health.js'
import { metricsPlugin } from './ops/metrics-plugin.js'
import { registerOpenApi } from './ops/openapi.js'
import { readinessPlugin } from './ops/readiness-plugin.js'
import { requestAccounting } from './ops/request-accounting.js'
import { portalPlugin } from './portal/plugin.js'
import { proxyRoutes } from './proxy/plugin.js'
import { decideOnlyProxiedPaths, shapeRefusal } from './proxy/decision.js'
import { secretScanningRoutes } from './secret-scanning/routes.js'
import { requestLogPlugin } from './request-log/plugin.js'
import { Keyring } from './signing-keys/keyring.js'
import { signingKeysPlugin } from './signing-keys/plugin.js'
import { STORE_DEADLINES } from './store/deadlines.js'
import { tracesPlugin } from './traces/plugin.js'
import { usageMeterPlugin } from './usage/meter-plugin.js'
import { webhookDeliveryPlugin } from './webhooks/delivery-plugin.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The signing keys (signing-keys/keyring.ts). */
    keyring: Keyring
    /** Verifies and remembers access tokens (auth/access-tokens.ts), for the tenancy checks. */
    accessTokens: AccessTokens
    /** Built with AUTHZ_PORT: its hooks are in place, and it may be handed decisions (forward-auth/). */
    decides: boolean
  }
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { routes, signingKeysKey, answersKey } = checkDeps(deps)
  const { config } = deps
  const app = Fastify(fastifyOptions(deps))
  configureServer(app, deps, routes)
  app.decorate('storeDeadlines', { ...STORE_DEADLINES, ...deps.tuning?.storeDeadlines })
  // Filled by the signing-keys plugin below, before any route that signs is registered.
  app.decorate('keyring', deps.keyring ?? new Keyring({ clock: deps.tuning?.signingKeys?.clock }))

  await app.register(parsing)
  await app.register(routeKinds)
  // onClose hooks run last registered first: the meter writes its last counts before the cache
  // lets Redis go.
  await app.register(metricsPlugin, metricsOptions(deps))
  // Before every other hook: a request refused by the guards has its span too.
  await app.register(tracesPlugin, tracesOptions(deps))
  await app.register(tenancyCachePlugin, cacheOptions(deps))
  if (signingKeysKey !== undefined)
    try {
      await app.register(signingKeysPlugin, signingKeysOptions(deps, signingKeysKey))
    } catch (err) {
      // A wrong ENCRYPTION_KEY: let go of what is open already (Redis) before the caller hears of it.
      await app.close()
      throw err
    }
  await app.register(requestLogPlugin, requestLogOptions(deps))
  await app.register(usageMeterPlugin, usageMeterOptions(deps))
  await app.register(eventRetentionPlugin, eventRetentionOptions(deps))
  await app.register(webhookDeliveryPlugin, webhookDeliveryOptions(deps, answersKey))
  await app.register(limitsPlugin, limitsOptions(deps))
  await app.register(alertsPlugin, alertsOptions(deps))
  app.decorate('accessTokens', accessTokens(app, deps))
  await app.register(requestAccounting, accountingOptions(deps))
  await app.register(readinessPlugin)
  await app.register(requestGuards)
  app.setErrorHandler(sendError)
  // With AUTHZ_PORT: a decision only for the route table's paths, and its refusal as its asker
  // reads it. Without, nothing of it is on any request's way.
  app.decorate('decides', config.authzPort !== null)
  if (app.decides) {
    app.addHook('onRequest', decideOnlyProxiedPaths)
    app.addHook('onSend', shapeRefusal)
  }

  await registerOpenApi(app)
  await app.register(healthRoutes, healthOptions(app, deps))
  await app.register(credentialRoutes, credentialOptions(app))
  await app.register(oauthRoutes, oauthOptions(app, deps))
  await app.register(secretScanningRoutes, secretScanningOptions(app, deps))
  // The web console (CONSOLE=on): a page over the management API; off, its path is like any other.
  if (config.console) await app.register(consolePlugin, consoleOptions(deps, routes))
  const logReader = requestLogReader(app, deps)
  await app.register(managementRoutes, managementOptions(app, deps, answersKey, logReader, routes))
  // The sub-account portal comes with the console: its page and its API (portal/plugin.ts).
  if (config.console) await app.register(portalPlugin, portalOptions(deps, logReader))
  await app.register(proxyRoutes, proxyOptions(app, deps, routes))

  return app
}

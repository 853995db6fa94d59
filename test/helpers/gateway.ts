// The one way tests build the gateway in-process: buildApp on a fresh database (or one shared
// with another gateway, as two replicas of a deployment share theirs), on the tests' Redis with a
// key prefix of its own (or on a Redis of the test's choosing, or none), listening on
// 127.0.0.1:0 (or not at all, for tests that inject). Closed at teardown the way main.ts drains.
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import { buildApp } from '../../src/app.js'
import { listenForDecisions } from '../../src/forward-auth/listener.js'
import type { AppDeps, AppTuning } from '../../src/app-deps.js'
import { createParentWithKey, mintKey } from '../../src/auth/mint.js'
import { loadConfig } from '../../src/config.js'
import type { Metrics } from '../../src/ops/metrics.js'
import { openOneConnection, openStore, type Sql, type Store } from '../../src/store/db.js'
import { closeUnderWay } from './close-watch.js'
import { freshDatabase, type TestDatabase } from './db.js'
import { orTimeout } from './poll.js'
import { TEST_ENCRYPTION_KEY } from './encryption-key.js'
import { REDIS_URL, redisPrefix, requireRedis } from './redis.js'
import { UNHURRIED_STORE_DEADLINES } from './store-deadlines.js'
import type { TestLike } from './test-like.js'
import type { JsonBody } from './json.js'

/** What a test may set; the app's tuning (timings, clocks, stand-ins: AppTuning) is passed whole. */
export interface GatewayOptions extends AppTuning {
  /** Listen on 127.0.0.1:0 (default); false: build only, for `call` (which makes it ready). */
  listen?: boolean
  /** Also listen for decisions (AUTHZ_PORT) on 127.0.0.1:0, as start.ts does: `authzUrl`. */
  authz?: boolean
  /** Share a database with another gateway: two replicas of one deployment. Default: a fresh one. */
  database?: TestDatabase
  /**
   * A pool of the gateway's own, opened as main.ts opens it (postgres.js with its connect
   * timeout), on `url`: through a relay that a fault test breaks, or where nothing answers.
   * Default: the gateway uses the test database's pool, which the test also writes with.
   */
  /** The gateway's own pools (openStore); statementTimeoutMs: the main pool's, default the management deadline. */
  pool?: { url?: string; maxConnections?: number; statementTimeoutMs?: number }
  /**
   * The Redis the gateway uses: the tests' by default, another by URL, false for none, or the
   * environment of a topology (REDIS_SENTINELS…, REDIS_CLUSTER_NODES: helpers/redis-topologies.ts).
   */
  redis?: string | false | { env: Record<string, string> }
  /** Share a key prefix (and so the invalidation channel) with another gateway. */
  redisKeyPrefix?: string
  upstreamUrl?: string
  /** The GATEWAY_CONFIG document (routes etc.); default: none. */
  gatewayConfig?: Record<string, unknown>
  /** A pino instance lets a test capture every line (default: no logging). */
  logger?: AppDeps['logger']
  /** Broken relays on the gateway's way to a store are restored before it closes: its last usage flush needs Postgres. */
  relays?: readonly { mode(): string; restore(): Promise<void> }[]
  /** Record every route the app registers, in `routes`. */
  recordRoutes?: boolean
  /** More environment for loadConfig (MAX_CONNECTIONS, …). */
  env?: Record<string, string>
  /**
   * The signing keys; default: the ones stored in the database (made on its first start, shared by
   * replicas of one database), under TEST_ENCRYPTION_KEY unless `env` names another.
   */
  keyring?: AppDeps['keyring']
  /** Where the gateway counts (main.ts's: `createMetrics({ processMetrics: true })`); default: a registry of its own. */
  metrics?: AppDeps['metrics']
}

export interface Parent {
  id: string
  apiKey: string
  /** The id of the key `apiKey` is. */
  keyId: string
}

export interface RegisteredRoute {
  method: string
  url: string
  /** Its schemas, as registered: body, querystring, params, headers, response by status. */
  schema?: Record<string, unknown>
}

export type CallOptions = Omit<InjectOptions, 'body' | 'payload'> & { body?: unknown; acting?: string }

export interface TestGateway {
  app: FastifyInstance
  /** http://127.0.0.1:<port> once it listens; '' when built with `listen: false`. */
  url: string
  /** With `authz`: http://127.0.0.1:<port> of its decisions' listener (AUTHZ_PORT); else ''. */
  authzUrl: string
  port: number
  database: TestDatabase
  /** The test database's pool (not the gateway's own, when it has one). */
  sql: Sql
  /** What the gateway reads and writes through. */
  store: Store
  redisKeyPrefix: string | undefined
  /** With `recordRoutes`: every route registered, HEAD and trailing-slash aliases included. */
  routes: readonly RegisteredRoute[]
  /** A parent account on the gateway's database (with both management scopes, unless `scopes`). */
  createParent(options?: { name?: string; scopes?: string[] }): Promise<Parent>
  /** Injects a request as `apiKey`, with a JSON body when `body` is given. */
  call(apiKey: string | null, options: CallOptions): Promise<LightMyRequestResponse>
  /**
   * A graceful stop as main.ts drains on SIGTERM (without its delay): draining (so that every
   * answer from now on says Connection: close), app.close() (in-flight requests finish, usage is
   * flushed), then its own pool. Idempotent; teardown calls it too.
   */
  close(): Promise<void>
}

/** A parent account with its key: both management scopes, or a key with exactly `scopes`. */
export async function createParent(sql: Sql, options: { name?: string; scopes?: string[] } = {}): Promise<Parent> {
  return sql.begin(async (tx) => {
    const { account, key } = await createParentWithKey(tx, {
      name: options.name ?? 'parent',
      externalId: null,
      extraScopes: [],
    })
    if (options.scopes === undefined) return { id: account.id, apiKey: key.apiKey, keyId: key.row.id }
    const scoped = await mintKey(tx, {
      tenantId: account.id,
      name: 'scoped',
      scopes: options.scopes,
      withClientSecret: false,
    })
    return { id: account.id, apiKey: scoped.apiKey, keyId: scoped.row.id }
  })
}

/**
 * How long a gateway's close may take before the test fails naming what it waits on: closes take
 * well under a second, and a hook waiting on a store gives up within its own few seconds.
 */
const CLOSE_LIMIT_MS = 60_000

/** Closes `app`, or fails past `limitMs` with what the close still waits on (close-watch.ts). */
async function closedWithin(app: FastifyInstance, limitMs: number): Promise<void> {
  const closing = app.close().then(() => true)
  if (!(await orTimeout(closing, limitMs, false)))
    throw new Error(`the gateway's close did not end within ${limitMs} ms:\n${await closeUnderWay(app)}`)
}

/** Makes `app` ready, or closes it and rethrows. */
async function ready(app: FastifyInstance): Promise<FastifyInstance> {
  try {
    await app.ready()
  } catch (err) {
    await app.close()
    throw err
  }
  return app
}

/**
 * Runs `build` while recording every route registered: fastify publishes each new instance on this
 * channel before any plugin runs, so an onRoute hook added there sees the routes of every plugin.
 */
async function recordingRoutes<T>(build: () => Promise<T>): Promise<{ built: T; routes: RegisteredRoute[] }> {
  const routes: RegisteredRoute[] = []
  const onInstance = (message: unknown) => {
    const { fastify } = message as { fastify: FastifyInstance }
    fastify.addHook('onRoute', (route) => {
      // Read now: fastify reuses the options object for a prefixed root's trailing-slash alias.
      const schema = route.schema as Record<string, unknown> | undefined
      for (const method of [route.method].flat())
        routes.push({ method, url: route.url, ...(schema === undefined ? {} : { schema }) })
    })
  }
  subscribe('fastify.initialization', onInstance)
  try {
    return { built: await build(), routes }
  } finally {
    unsubscribe('fastify.initialization', onInstance)
  }
}

/**
 * `count` replicas of one deployment, with the same options: one database and one Redis key prefix
 * (and so one invalidation channel), each its own app, cache and limiter.
 */
export async function startReplicas(
  t: TestLike,
  count: number,
  options: GatewayOptions = {},
  /** What one replica (1 to count - 1) tunes otherwise than the others. */
  replicaTuning: (replica: number) => AppTuning = () => ({}),
): Promise<TestGateway[]> {
  const first = await startGateway(t, options)
  const shared = { ...options, database: first.database, redisKeyPrefix: first.redisKeyPrefix }
  const others = await Promise.all(
    Array.from({ length: count - 1 }, (_, i) => startGateway(t, { ...shared, ...replicaTuning(i + 1) })),
  )
  return [first, ...others]
}

export async function startGateway(t: TestLike, options: GatewayOptions = {}): Promise<TestGateway> {
  const database = options.database ?? (await freshDatabase(t))
  const redisUrl = options.redis ?? REDIS_URL
  if (redisUrl === REDIS_URL) await requireRedis()
  const redisKeyPrefix = options.redisKeyPrefix ?? (redisUrl === false ? undefined : redisPrefix(t))
  const databaseUrl = options.pool?.url ?? database.url
  const store: Store =
    options.pool === undefined
      ? {
          sql: database.sql,
          embedded: false,
          // As openStore's: the request log's COPY on a connection of its own.
          openOwnConnection: () => openOneConnection(database.url, 'tenancy-gateway test own'),
          close: async () => {},
        }
      : await openStore({
          databaseUrl,
          dataDir: tmpdir(),
          maxConnections: options.pool.maxConnections,
          // As long as the call's deadline, which tests lengthen for a loaded machine.
          statementTimeoutMs:
            options.pool.statementTimeoutMs ??
            options.storeDeadlines?.managementMs ??
            UNHURRIED_STORE_DEADLINES.managementMs,
        })
  const config = {
    ...loadConfig({
      DATABASE_URL: databaseUrl,
      ...(redisUrl === false ? {} : typeof redisUrl === 'string' ? { REDIS_URL: redisUrl } : redisUrl.env),
      ...(options.upstreamUrl === undefined ? {} : { UPSTREAM_URL: options.upstreamUrl }),
      // Tests send management calls as fast as they can: the default 50/1s is tested on its own.
      MANAGEMENT_RATE: '1000000/1s',
      ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
      // Built to decide (app.ts); the listener itself is started below, on a port of its own.
      ...(options.authz === true ? { AUTHZ_PORT: '0' } : {}),
      ...options.env,
    }),
    // The route table is the test's, never the repository's config/gateway.yaml.
    gatewayConfig: options.gatewayConfig ?? {},
  }
  // REQUEST_LOG_DATABASE_URL in `env`: a pool of its own, as main.ts opens it.
  const logStore =
    config.requestLogDatabaseUrl === undefined
      ? null
      : await openStore({ databaseUrl: config.requestLogDatabaseUrl, dataDir: tmpdir() })
  const build = () =>
    buildApp({
      config,
      store,
      ...(logStore === null ? {} : { requestLogStore: logStore }),
      redisKeyPrefix,
      logger: options.logger ?? false,
      keyring: options.keyring,
      metrics: options.metrics,
      tuning: { ...options, storeDeadlines: { ...UNHURRIED_STORE_DEADLINES, ...options.storeDeadlines } },
    })
  let app: FastifyInstance
  let routes: RegisteredRoute[] = []
  try {
    // Ready, so that every plugin has registered its routes.
    if (options.recordRoutes === true)
      ({ built: app, routes } = await recordingRoutes(async () => ready(await build())))
    else app = await build()
  } catch (err) {
    await logStore?.close()
    await store.close()
    throw err
  }

  let closing: Promise<void> | null = null
  const close = () =>
    (closing ??= (async () => {
      for (const relay of options.relays ?? []) if (relay.mode() !== 'pass') await relay.restore()
      try {
        app.readiness.draining = true
        await closedWithin(app, CLOSE_LIMIT_MS)
      } finally {
        await logStore?.close()
        await store.close()
      }
    })())
  t.teardown(close)

  // As start.ts: the decisions' listener closes with the app, before its stores.
  let closeDecisions = async () => {}
  if (options.authz === true) app.addHook('preClose', () => closeDecisions())
  let port = 0
  if (options.listen !== false) {
    await app.listen({ port: 0, host: '127.0.0.1' })
    port = (app.server.address() as AddressInfo).port
  }
  let authzUrl = ''
  if (options.authz === true) {
    await app.ready()
    const decisions = await listenForDecisions(app, 0, '127.0.0.1')
    closeDecisions = () => decisions.close()
    authzUrl = `http://127.0.0.1:${decisions.port}`
  }

  const call: TestGateway['call'] = (apiKey, { body, acting, headers, ...rest }) =>
    app.inject({
      ...rest,
      headers: {
        ...(apiKey === null ? {} : { authorization: `Bearer ${apiKey}` }),
        ...(acting === undefined ? {} : { 'x-service-acting-tenant': acting }),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      ...(body === undefined ? {} : { payload: typeof body === 'string' ? body : JSON.stringify(body) }),
    })

  return {
    app,
    url: port === 0 ? '' : `http://127.0.0.1:${port}`,
    authzUrl,
    port,
    database,
    sql: database.sql,
    store,
    redisKeyPrefix,
    routes,
    createParent: (parentOptions) => createParent(database.sql, parentOptions),
    call,
    close,
  }
}

/**
 * The value of one series of a metric in the registry of an app (or of anything else that holds
 * the gateway's metrics): the first whose labels include all of `labels` (so none given: the first
 * series); 0 when there is none yet.
 */
export async function metricValue(
  holder: { metrics: Metrics },
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const metric = holder.metrics.registry.getSingleMetric(name)
  if (metric === undefined) throw new Error(`no metric ${name}`)
  const { values } = await metric.get()
  const value = values.find((v) =>
    Object.entries(labels).every(([k, want]) => String((v.labels as Record<string, unknown>)[k]) === want),
  )
  return value?.value ?? 0
}

/** tgw_recent_admissions_total: requests a gateway admitted from its memory of the last second. */
export async function recentAdmissions(gateway: { app: { metrics: Metrics } }): Promise<number> {
  return metricValue(gateway.app, 'tgw_recent_admissions_total')
}

/**
 * The management API as `apiKey` acting as itself, for a test's setup: the body of a 2xx (null
 * when empty), or a throw naming the call and its answer.
 */
export function managementAs(gateway: TestGateway, apiKey: string) {
  return async (method: string, path: string, body?: unknown): Promise<JsonBody> => {
    const res = await gateway.call(apiKey, {
      method: method as 'GET',
      url: `/v1/sub-accounts${path}`,
      acting: 'self',
      body,
    })
    if (res.statusCode >= 300) throw new Error(`${method} ${path}: ${res.statusCode} ${res.body}`)
    return res.body === '' ? null : res.json()
  }
}

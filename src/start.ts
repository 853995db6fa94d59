// `startGateway`: config → store → migrations → app → listen → the embedded bootstrap, then the
// stop rules of signals.ts. It reads only the environment and the io it is given, so main.ts runs
// it on the process and tests run it in process (test/integration/start-gateway.test.ts).
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.js'
import { bootstrapEmbedded } from './bootstrap.js'
import { checkRedisAtStart } from './cache/redis-connection.js'
import { describeRedisTarget, variableOf } from './cache/redis-topology.js'
import { type Config, ConfigError, loadConfig } from './config.js'
import { resolveEncryptionKey } from './encryption/key.js'
import { loggerOptions } from './ops/logging.js'
import { createMetrics } from './ops/metrics.js'
import { serveMetrics } from './ops/metrics-server.js'
import { loadRouteTable } from './proxy/route-table.js'
import { type DecisionListener, listenForDecisions } from './forward-auth/listener.js'
import { HANDLED_SIGNALS, type ProcessEvent, StopRules } from './signals.js'
import { type Store, openStore } from './store/db.js'
import { reachPostgres } from './store/first-contact.js'
import { migrate } from './store/migrate.js'

/** What the gateway is given of its process; main.ts passes the process's own. */
export interface GatewayIo {
  /** The log's stream: pino's lines, then the embedded bootstrap's key line (bootstrap.ts). */
  stdout: { write(text: string): unknown }
  stderr(text: string): void
  /** Ends the process; called once the drain is over, or at once on a second request to stop. */
  exit(code: number): void
  /** Listens for a signal, `unhandledRejection` or `uncaughtException` of the process. */
  on(event: NodeJS.Signals | 'unhandledRejection' | 'uncaughtException', listener: (arg: unknown) => void): void
  /** Milliseconds, for the rule of relayed signals (signals.ts); default Date.now. */
  clock?: () => number
}

/** A started gateway: its app (listening) and the port it listens on. */
export interface RunningGateway {
  app: FastifyInstance
  port: number
}

type Env = Readonly<Record<string, string | undefined>>

/** Runs `listen`, naming the variable behind a port that cannot be had (Node's message names none). */
async function listening<T>(
  variable: 'PORT' | 'METRICS_PORT' | 'AUTHZ_PORT',
  config: Config,
  listen: () => Promise<T>,
): Promise<T> {
  try {
    return await listen()
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    const port = variable === 'PORT' ? config.port : variable === 'METRICS_PORT' ? config.metricsPort : config.authzPort
    const where = `${variable}=${port} on HOST=${config.host}`
    if (code === 'EADDRINUSE')
      throw new Error(`${where}: the port is already in use; stop what holds it or set ${variable} to another`)
    if (code === 'EACCES')
      throw new Error(`${where}: permission denied (ports below 1024 need privileges); set ${variable} to another`)
    if (code === 'EADDRNOTAVAIL') throw new Error(`${where}: HOST is not an address of this machine`)
    // Not an address, nor a name that resolves (`999.1.1.1`, a typo): Node says only getaddrinfo's code.
    if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_FAIL')
      throw new Error(
        `${where}: HOST is neither an IP address nor a name this machine resolves; set HOST to an address of this machine (0.0.0.0: every IPv4 interface, :: every interface)`,
      )
    throw err
  }
}

/** The stores the app writes to: the main one and the request log's own, when it has one. */
async function openStores(config: Config): Promise<{ store: Store; logStore: Store | null }> {
  const store = await openStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, holder: 'the gateway' })
  const logStore =
    config.requestLogDatabaseUrl === undefined || config.requestLogRetentionDays === 0
      ? null
      : await openStore({
          databaseUrl: config.requestLogDatabaseUrl,
          dataDir: config.dataDir,
          holder: 'the request log',
        })
  return { store, logStore }
}

/** Logged once listening when no route and no UPSTREAM_URL give the proxy anything to serve. */
export const NOTHING_TO_PROXY =
  "nothing to proxy: GATEWAY_CONFIG's route table has no routes and UPSTREAM_URL is not set, so every path but the " +
  "gateway's own answers 404 route_not_found: set UPSTREAM_URL to the upstream (npm run echo-upstream serves one on " +
  'http://127.0.0.1:9000) or add routes to GATEWAY_CONFIG'

/** Builds and listens; whatever fails closes what was opened before it is thrown. */
async function start(
  env: Env,
  io: GatewayIo,
): Promise<{ app: FastifyInstance; config: Config; close(): Promise<void>; decisions: DecisionListener | null }> {
  const config = loadConfig(env)
  const routes = loadRouteTable(config.gatewayConfig, config.upstreamUrl, config.console)
  // A refusal (a database it lacks, a wrong password) stops the start; no answer starts degraded.
  if (config.redis !== undefined && (await checkRedisAtStart(config.redis)) === 'unreachable')
    io.stderr(
      `warning: ${variableOf(config.redis)} (${describeRedisTarget(config.redis)}) did not answer; starting without Redis until it does\n`,
    )
  const { store, logStore } = await openStores(config)
  const metrics = createMetrics({ processMetrics: true })
  let app: FastifyInstance
  let decisions: DecisionListener | null = null
  const closeStores = async () => {
    await logStore?.close()
    await store.close()
  }
  try {
    // Before anything is asked of Postgres: without DATABASE_URL's key, nothing could be signed.
    // The embedded database's key file is made while the store's lock is held.
    const encryptionKey = resolveEncryptionKey(config)
    if (config.databaseUrl !== undefined) await reachPostgres(store.sql, config.databaseUrl)
    await migrate(store.sql)
    // Loads the signing keys: a wrong ENCRYPTION_KEY stops the start here.
    app = await buildApp({
      config: { ...config, encryptionKey },
      store,
      ...(logStore === null ? {} : { requestLogStore: logStore }),
      routes,
      metrics,
      logger: { ...loggerOptions(config.logLevel), stream: io.stdout },
    })
  } catch (err) {
    await closeStores()
    throw err
  }
  // The app first (in-flight requests finish, usage and the request log are flushed), then the stores.
  const close = async () => {
    await app.close()
    await closeStores()
  }
  try {
    const metricsServer = await listening('METRICS_PORT', config, () =>
      serveMetrics(
        metrics.registry,
        config.metricsPort,
        config.host,
        (path) => app.inject({ method: 'GET', url: path }),
        config.traces !== null,
      ),
    )
    app.addHook('onClose', async () => {
      await new Promise((resolve) => metricsServer.close(resolve))
    })
    // Closed with PORT, before the stores: decisions in flight end, and are counted, first.
    app.addHook('preClose', async () => {
      await decisions?.close()
    })
    await listening('PORT', config, () => app.listen({ port: config.port, host: config.host }))
    const authzPort = config.authzPort
    // Once the app is ready (its router is what decides).
    if (authzPort !== null)
      decisions = await listening('AUTHZ_PORT', config, () =>
        listenForDecisions(app, authzPort, config.host, config.maxConnections),
      )
    if (routes.length === 0) app.log.warn(NOTHING_TO_PROXY)
    // Only once both ports are bound: a start that fails before has created no account whose key
    // was never shown (docs/decisions/0249-the-bootstrap-account-is-made-once-the-gateway.md).
    if (store.embedded) await bootstrapEmbedded(store.sql, (line) => io.stdout.write(line))
  } catch (err) {
    // Close the store (and the embedded database's lock) before the process exits.
    await close()
    throw err
  }
  return { app, config, close, decisions }
}

/**
 * The drain (docs/operations.md): /readyz answers 503 at once; after SHUTDOWN_DELAY_MS the gateway
 * stops accepting, and requests in flight get SHUTDOWN_TIMEOUT_MS before their connections are cut.
 * Usage is flushed and the pools closed either way.
 */
async function drain(
  app: FastifyInstance,
  config: Config,
  close: () => Promise<void>,
  decisions: DecisionListener | null,
): Promise<void> {
  app.readiness.draining = true
  if (config.shutdownDelayMs > 0) await sleep(config.shutdownDelayMs)
  const stopped = close()
  const timer = setTimeout(() => {
    app.log.warn(
      { timeoutMs: config.shutdownTimeoutMs },
      'requests still in flight at the shutdown timeout; closing their connections',
    )
    app.server.closeAllConnections()
    decisions?.server.closeAllConnections()
  }, config.shutdownTimeoutMs)
  try {
    await stopped
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Starts the gateway on `env`, then follows the stop rules (signals.ts) on what `io.on` hears:
 * a drain, then `io.exit(0)` (1 after an error). A start that fails writes one line to `io.stderr`
 * and calls `io.exit(1)`; it then resolves to null.
 */
export async function startGateway(env: Env, io: GatewayIo): Promise<RunningGateway | null> {
  let started: Awaited<ReturnType<typeof start>>
  try {
    started = await start(env, io)
  } catch (err) {
    // One clear line, then a non-zero exit: a configuration or migration problem must stop the deploy.
    io.stderr(`${err instanceof ConfigError ? err.message : `gateway failed to start: ${(err as Error).message}`}\n`)
    io.exit(1)
    return null
  }
  const { app, config, close, decisions } = started
  const rules = new StopRules(io.clock)
  // The last resort: whatever still hangs (a store that does not close) ends with the process.
  const graceMs = config.shutdownDelayMs + config.shutdownTimeoutMs + 10_000
  const closeAndExit = async () => {
    const timer = setTimeout(() => {
      io.stderr(`killed by timeout (${graceMs}ms)\n`)
      io.exit(1)
    }, graceMs)
    try {
      await drain(app, config, close, decisions)
      app.log.info('closed')
      io.exit(rules.exitCode())
    } catch (err) {
      io.stderr(`${(err as Error).stack ?? err}\n`)
      io.exit(1)
    } finally {
      clearTimeout(timer)
    }
  }
  const hear = (event: ProcessEvent) => {
    const action = rules.hear(event)
    if (action.do === 'note') app.log.error({ err: action.error }, 'another unhandled rejection while closing')
    else if (action.do === 'quit') {
      app.log.error(action.error === undefined ? {} : { err: action.error }, action.line)
      io.exit(1)
    } else if (action.do === 'drain') {
      if (action.failure !== null) app.log.error({ err: action.failure.error }, 'closing after an error')
      else
        app.log.info(
          { signal: action.signal, delayMs: config.shutdownDelayMs, timeoutMs: config.shutdownTimeoutMs },
          'draining',
        )
      void closeAndExit()
    }
  }
  for (const name of HANDLED_SIGNALS) io.on(name, () => hear({ kind: 'signal', name }))
  io.on('unhandledRejection', (error) => hear({ kind: 'error', error, fatal: false }))
  io.on('uncaughtException', (error) => hear({ kind: 'error', error, fatal: true }))
  return { app, port: (app.server.address() as AddressInfo).port }
}

// The only process code: config → store → migrations → app → listen → the embedded bootstrap;
// close-with-grace on signals.
import { setTimeout as sleep } from 'node:timers/promises'
import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { bootstrapEmbedded } from './bootstrap.js'
import { checkRedisAtStart } from './cache/redis-connection.js'
import { describeRedisTarget, variableOf } from './cache/redis-topology.js'
import { ConfigError, loadConfig } from './config.js'
import { resolveEncryptionKey } from './encryption/key.js'
import { loggerOptions, stdoutDestination } from './ops/logging.js'
import { createMetrics } from './ops/metrics.js'
import { serveMetrics } from './ops/metrics-server.js'
import { loadRouteTable } from './proxy/route-table.js'
import { openStore, reachPostgres } from './store/db.js'
import { migrate } from './store/migrate.js'

/**
 * Runs `listen`, naming the variable behind a port that cannot be had: Node's own message says
 * only `listen EADDRINUSE: address already in use 0.0.0.0:9091`.
 */
async function listening<T>(
  variable: 'PORT' | 'METRICS_PORT',
  port: number,
  host: string,
  listen: () => Promise<T>,
): Promise<T> {
  try {
    return await listen()
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    const where = `${variable}=${port} on HOST=${host}`
    if (code === 'EADDRINUSE')
      throw new Error(`${where}: the port is already in use; stop what holds it or set ${variable} to another`)
    if (code === 'EACCES')
      throw new Error(`${where}: permission denied (ports below 1024 need privileges); set ${variable} to another`)
    if (code === 'EADDRNOTAVAIL') throw new Error(`${where}: HOST is not an address of this machine`)
    throw err
  }
}

/** The signals that ask for a graceful stop, and when sent again later, for an immediate one. */
const STOP_SIGNALS = ['SIGTERM', 'SIGINT'] as const
/** A stop signal again within this long is a copy passed on by npm (see below). */
const RELAYED_WITHIN_MS = 1_000

async function main(): Promise<void> {
  const config = loadConfig(process.env)
  const routes = loadRouteTable(config.gatewayConfig, config.upstreamUrl, config.console)
  // A refusal (a database it lacks, a wrong password) stops the start; no answer starts degraded.
  if (config.redis !== undefined && (await checkRedisAtStart(config.redis)) === 'unreachable')
    process.stderr.write(
      `warning: ${variableOf(config.redis)} (${describeRedisTarget(config.redis)}) did not answer; starting without Redis until it does\n`,
    )
  const store = await openStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, holder: 'the gateway' })
  // The request log's own Postgres, when it has one (docs/configuration.md).
  const logStore =
    config.requestLogDatabaseUrl === undefined || config.requestLogRetentionDays === 0
      ? null
      : await openStore({
          databaseUrl: config.requestLogDatabaseUrl,
          dataDir: config.dataDir,
          holder: 'the request log',
        })
  const metrics = createMetrics({ processMetrics: true })
  // The log's stdout, held here so that the embedded bootstrap's key line goes out through it,
  // after the lines logged before (bootstrap.ts).
  const logStream = stdoutDestination()
  let app: Awaited<ReturnType<typeof buildApp>>
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
      logger: { ...loggerOptions(config.logLevel), stream: logStream },
    })
  } catch (err) {
    await logStore?.close()
    await store.close()
    throw err
  }

  // The app first (in-flight requests finish, usage and the request log are flushed), then the
  // stores it wrote to.
  async function shutdown(): Promise<void> {
    await app.close()
    await logStore?.close()
    await store.close()
  }

  /**
   * SIGTERM (docs/operations.md): /readyz answers 503 at once, so that load balancers stop sending; after
   * SHUTDOWN_DELAY_MS the gateway stops accepting connections, and requests in flight get
   * SHUTDOWN_TIMEOUT_MS to finish before their connections are cut. Usage is flushed and the
   * pools closed either way.
   */
  async function drain(): Promise<void> {
    app.readiness.draining = true
    if (config.shutdownDelayMs > 0) await sleep(config.shutdownDelayMs)
    const stopped = shutdown()
    const timer = setTimeout(() => {
      app.log.warn(
        { timeoutMs: config.shutdownTimeoutMs },
        'requests still in flight at the shutdown timeout; closing their connections',
      )
      app.server.closeAllConnections()
    }, config.shutdownTimeoutMs)
    try {
      await stopped
    } finally {
      clearTimeout(timer)
    }
  }

  try {
    const metricsServer = await listening('METRICS_PORT', config.metricsPort, config.host, () =>
      serveMetrics(metrics.registry, config.metricsPort, config.host, (path) =>
        app.inject({ method: 'GET', url: path }),
      ),
    )
    app.addHook('onClose', async () => {
      await new Promise((resolve) => metricsServer.close(resolve))
    })
    await listening('PORT', config.port, config.host, () => app.listen({ port: config.port, host: config.host }))
    // Only once both ports are bound: a start that fails before has created no account whose key
    // was never shown (docs/decisions.md, The bootstrap account).
    if (store.embedded) await bootstrapEmbedded(store.sql, (line) => logStream.write(line))
  } catch (err) {
    // Close the store (and the embedded database's lock) before the process exits.
    await shutdown()
    throw err
  }

  // The last resort: whatever still hangs (a store that does not close) ends with the process.
  const graceMs = config.shutdownDelayMs + config.shutdownTimeoutMs + 10_000
  let failure: unknown = null
  let closing = false
  // SIGTERM, SIGINT and SIGHUP are handled below, not by close-with-grace, which exits at once on
  // any second signal.
  let stopSignal: { name: NodeJS.Signals; at: number } | null = null
  /** The signal that started the drain, for its log line. */
  let drainedOn: NodeJS.Signals | undefined
  const grace = closeWithGrace(
    { delay: graceMs, skip: ['unhandledRejection', ...STOP_SIGNALS, 'SIGHUP'] },
    async ({ signal, err }) => {
      closing = true
      const cause = err ?? failure
      if (cause) app.log.error({ err: cause }, 'closing after an error')
      else
        app.log.info(
          { signal: signal ?? drainedOn, delayMs: config.shutdownDelayMs, timeoutMs: config.shutdownTimeoutMs },
          'draining',
        )
      await drain()
      app.log.info('closed')
      // A rejection during a signal's drain is a bug too: exit 1 all the same.
      if (err ?? failure) process.exit(1)
    },
  )
  // `npm start` passes a terminal's Ctrl-C or a process group's SIGTERM on to the gateway, which
  // gets the same signal again within milliseconds: that copy is no request to stop at once. A
  // second signal later than RELAYED_WITHIN_MS is one, and ends the drain.
  for (const name of STOP_SIGNALS)
    process.on(name, () => {
      if (stopSignal === null) {
        stopSignal = { name, at: Date.now() }
        startDrain(name)
        return
      }
      if (Date.now() - stopSignal.at < RELAYED_WITHIN_MS) return
      app.log.error(`second ${name}, exiting`)
      process.exit(1)
    })
  // A hangup (the terminal closed, or the kernel's word to a stopped process group whose parent
  // went away) stops the gateway as SIGTERM does, but never cuts a drain short.
  process.on('SIGHUP', () => startDrain('SIGHUP'))
  function startDrain(signal: NodeJS.Signals): void {
    if (closing) return
    drainedOn = signal
    void grace.close()
  }
  // An unhandled rejection is a bug: close as on SIGTERM (usage flushed), then exit 1 so that the
  // orchestrator restarts the process. Handled here, not by close-with-grace, which would exit at
  // once, unflushed, on a second one during the drain.
  process.on('unhandledRejection', (reason) => {
    // One drain: a rejection while one runs (after a signal, or a first rejection) is logged and
    // makes the exit 1, but starts no second close.
    if (closing || failure !== null) {
      failure ??= reason
      return app.log.error({ err: reason }, 'another unhandled rejection while closing')
    }
    failure = reason
    void grace.close()
  })
}

main().catch((err: unknown) => {
  // One clear line, then a non-zero exit: a configuration or migration problem must stop the deploy.
  const message = err instanceof ConfigError ? err.message : `gateway failed to start: ${(err as Error).message}`
  process.stderr.write(`${message}\n`)
  process.exit(1)
})

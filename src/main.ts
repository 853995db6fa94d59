// The only process code: config → store → migrations → app → listen; close-with-grace on signals.
import closeWithGrace from 'close-with-grace'
import { buildApp, LOG_REDACT } from './app.js'
import { bootstrapEmbedded } from './bootstrap.js'
import { ConfigError, loadConfig } from './config.js'
import { openStore } from './store/db.js'
import { migrate } from './store/migrate.js'

async function main(): Promise<void> {
  const config = loadConfig(process.env)
  const store = await openStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, holder: 'the gateway' })
  try {
    await migrate(store.sql)
    if (store.embedded) await bootstrapEmbedded(store.sql)
  } catch (err) {
    await store.close()
    throw err
  }

  const app = await buildApp({
    config,
    store,
    logger: { level: config.logLevel, redact: { paths: LOG_REDACT, censor: '[redacted]' } },
  })
  app.addHook('onClose', async () => store.close())

  closeWithGrace({ delay: 10_000 }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'closing after an error')
    else app.log.info({ signal }, 'closing')
    await app.close()
  })

  try {
    await app.listen({ port: config.port, host: config.host })
  } catch (err) {
    // Close the store (and the embedded database's lock) before the process exits.
    await app.close()
    throw err
  }
}

main().catch((err: unknown) => {
  // One clear line, then a non-zero exit: a configuration or migration problem must stop the deploy.
  const message = err instanceof ConfigError ? err.message : `gateway failed to start: ${(err as Error).message}`
  process.stderr.write(`${message}\n`)
  process.exit(1)
})

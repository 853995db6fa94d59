// A gateway replica in a process of its own, for test/integration/webhook-replicas.test.ts to kill
// mid-delivery: run with `node --import scripts/typescript.mjs` and an IPC channel. It builds the app as main.ts does
// (no Redis, WEBHOOKS_ALLOW_INSECURE), listens on 127.0.0.1:0 and sends { type: 'listening', port }.
// Environment: DATABASE_URL.
import type { AddressInfo } from 'node:net'
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { openStore } from '../../src/store/db.js'
import { TEST_ENCRYPTION_KEY } from './encryption-key.js'
import { UNHURRIED_STORE_DEADLINES } from './store-deadlines.js'

if (process.send === undefined) throw new Error('run with an IPC channel')
const databaseUrl = process.env.DATABASE_URL
const config = {
  ...loadConfig({
    DATABASE_URL: databaseUrl,
    MANAGEMENT_RATE: '1000000/1s',
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
    WEBHOOKS_ALLOW_INSECURE: 'true',
  }),
  gatewayConfig: {},
}
const store = await openStore({ databaseUrl, dataDir: '.' })
const app = await buildApp({ config, store, logger: false, tuning: { storeDeadlines: UNHURRIED_STORE_DEADLINES } })
await app.listen({ port: 0, host: '127.0.0.1' })
process.send({ type: 'listening', port: (app.server.address() as AddressInfo).port })
// The test process is gone: so is this one.
process.on('disconnect', () => process.exit(1))

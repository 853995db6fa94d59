// Idempotency keys on the embedded database (PGlite, no DATABASE_URL): the same SQL claims, keeps
// and replays there (docs/api.md, Idempotency).
import t from 'tap'
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { openStore } from '../../src/store/db.js'
import { migrate } from '../../src/store/migrate.js'
import { embeddedDataDir } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { createParent } from '../helpers/gateway.js'

t.test('a create replayed on the embedded database', async (t) => {
  const store = await openStore({ databaseUrl: undefined, dataDir: embeddedDataDir(t) })
  await migrate(store.sql)
  const config = loadConfig({ ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, MANAGEMENT_RATE: '1000000/1s' })
  const app = await buildApp({ config, store, logger: false })
  // The app first (its request log and usage write their last records), then its store, as main.ts.
  t.teardown(async () => {
    await app.close()
    await store.close()
  })
  const parent = await createParent(store.sql)
  const create = (name: string) =>
    app.inject({
      method: 'POST',
      url: '/v1/sub-accounts',
      headers: {
        authorization: `Bearer ${parent.apiKey}`,
        'content-type': 'application/json',
        'idempotency-key': 'k',
        'x-service-acting-tenant': 'self',
      },
      payload: JSON.stringify({ name }),
    })
  const first = await create('embedded')
  t.equal(first.statusCode, 201, first.body.slice(0, 200))
  const again = await create('embedded')
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(again.body, first.body)
  t.equal((await create('other')).statusCode, 422)
})

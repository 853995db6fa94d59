// Latency of the management API (docs/api.md) with 10,000 sub-accounts under one parent: a gateway
// built in this process (buildApp, real Postgres and Redis) on a loopback port, one request at a
// time over one keep-alive socket. Compare each operation with GET /healthz of the same run, not
// raw milliseconds between runs. bench/README.md has the knobs.
import { resolve } from 'node:path'
import type { FastifyInstance } from 'fastify'
import postgres from 'postgres'
import { buildApp } from '../src/app.js'
import { loadConfig } from '../src/config.js'
import { openStore, type Store } from '../src/store/db.js'
import {
  client,
  createDatabase,
  ENCRYPTION_KEY,
  envInt,
  measureInTurn,
  REDIS_URL,
  reportHead,
  ROOT,
  run,
  table,
  deleteRedisPrefix,
} from './lib.js'
import { extIdOf, seed, subIdOf } from './seed.js'

const N = envInt('BENCH_N', 2000)
const SEEDED = 10_000
/** How many rows precede the "deep" list page. */
const DEEP = 9_000

async function main(): Promise<void> {
  const db = await createDatabase('bench')
  const prefix = `tgwmgmt:${db.name}:`
  let app: FastifyInstance | null = null
  let store: Store | null = null
  try {
    const seeding = postgres(db.url, { max: 2, onnotice: () => {} })
    const seeded = await seed(seeding, { seed: db.name, subAccounts: SEEDED, keysPerSub: 1, usageDays: 1 }).finally(
      () => seeding.end(),
    )
    store = await openStore({ databaseUrl: db.url, dataDir: '/nonexistent' })
    const config = loadConfig(
      {
        // Measured one request after another, far beyond the default 50 a second per parent.
        MANAGEMENT_RATE: '1000000000/1s',
        DATABASE_URL: db.url,
        ENCRYPTION_KEY,
        REDIS_URL,
        REDIS_KEY_PREFIX: prefix,
        LOG_LEVEL: 'warn',
        GATEWAY_CONFIG: resolve(ROOT, 'config/gateway.yaml'),
      },
      ROOT,
    )
    app = await buildApp({ config, store, redisKeyPrefix: prefix })
    const c = client(await app.listen({ host: '127.0.0.1', port: 0 }))
    const auth = { authorization: `Bearer ${seeded.parentKey}` }
    // The cursor after row DEEP, found by walking the list 100 rows at a time.
    let cursor = ''
    for (let walked = 0; walked < DEEP; walked += 100) {
      cursor = (
        JSON.parse(
          await c(
            { method: 'GET', path: `/v1/sub-accounts?limit=100${cursor && `&cursor=${cursor}`}`, headers: auth },
            200,
          ),
        ) as { next_cursor: string }
      ).next_cursor
    }
    const deep = `/v1/sub-accounts?limit=20&cursor=${cursor}`
    // One content check, outside the timed loops (which check statuses only): a keyset walk lands on row DEEP.
    const page = JSON.parse(await c({ method: 'GET', path: deep, headers: auth }, 200)) as {
      data: { external_id: string }[]
    }
    if (page.data[0]?.external_id !== extIdOf(DEEP))
      throw new Error(`walking ${DEEP} rows by next_cursor lands on ${page.data[0]?.external_id}`)

    console.error(`measuring ${N} samples per operation, in turn…`)
    const get = async (path: string) => async () => c({ method: 'GET', path, headers: auth }, 200)
    const results = await measureInTurn(
      [
        {
          name: 'GET /healthz (baseline)',
          sample: async () => async () => c({ method: 'GET', path: '/healthz' }, 200),
        },
        // The parent has active sub-accounts, so a write must name its tenant (docs/api.md).
        {
          name: 'create',
          sample: async (i) => async () =>
            c(
              {
                method: 'POST',
                path: '/v1/sub-accounts',
                headers: { ...auth, 'x-service-acting-tenant': 'self' },
                body: JSON.stringify({ name: `bench ${i}` }),
              },
              201,
            ),
        },
        { name: 'get', sample: () => get(`/v1/sub-accounts/${subIdOf(db.name, Math.floor(Math.random() * SEEDED))}`) },
        { name: 'list, first page (20)', sample: () => get('/v1/sub-accounts?limit=20') },
        { name: `list, page at ${DEEP} (20)`, sample: () => get(deep) },
      ],
      { n: N, warmup: 100 },
    )
    const baseline = results[0]!.p50
    console.log(
      [
        ...reportHead('bench:management'),
        `setup     ${SEEDED} seeded sub-accounts under one parent; ${N} timed samples per operation after 100 untimed, in turn; one keep-alive socket`,
        '',
        ...table(
          ['operation', 'p50 ms', 'p99 ms', 'p50 / healthz p50'],
          results.map((r) => [r.name, r.p50.toFixed(3), r.p99.toFixed(3), (r.p50 / baseline).toFixed(2)]),
        ),
      ].join('\n'),
    )
  } finally {
    await app?.close()
    await store?.close()
    await deleteRedisPrefix(prefix)
    await db.drop()
  }
}

run(main)

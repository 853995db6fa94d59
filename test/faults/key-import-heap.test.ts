// A key import of 100,000 lines, the route's limit, by a gateway process with the image's heap
// cap (Dockerfile: NODE_OPTIONS=--max-old-space-size=160) on the real Postgres and Redis
// (docs/key-imports.md; issue 86): it imports every line, a sample of the keys then authenticates
// on a real proxied route, and the same file again imports nothing. The process held every parsed
// line, then every batch's statements, and ran out of heap; it now holds a batch
// (docs/decisions/0371).
import { createHash, randomBytes } from 'node:crypto'
import t from 'tap'
import { createParentWithKey } from '../../src/auth/mint.js'
import { IMPORT_MAX_LINES } from '../../src/schemas/key-imports.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { freshDatabase } from '../helpers/db.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { REDIS_URL, redisClient, redisPrefix, requireRedis } from '../helpers/redis.js'
import { UNHURRIED_STORE_DEADLINES } from '../helpers/store-deadlines.js'
import { startUpstream } from '../helpers/upstream.js'
import { watchCrashes } from './crashes.js'
import { startReplicaProcess } from './replica-process.js'

/** The image's V8 old-space cap, in MiB (Dockerfile, helm values gateway.maxOldSpaceSizeMb). */
const IMAGE_HEAP_MB = 160
const SUB_ACCOUNTS = 20
const SAMPLE = 40

t.setTimeout(600_000)
await requireRedis()
watchCrashes(t)

const upstream = await startUpstream(t)
const db = await freshDatabase(t)
const sql = db.sql
const prefix = redisPrefix(t)
const redis = redisClient(t)
const gateway = await startReplicaProcess(t, {
  databaseUrl: db.url,
  routes: [{ prefix: '/things', upstream: upstream.url }],
  env: { REDIS_URL, REDIS_KEY_PREFIX: prefix },
  tuning: { storeDeadlines: UNHURRIED_STORE_DEADLINES },
  nodeFlags: [`--max-old-space-size=${IMAGE_HEAP_MB}`],
})
await until(60_000, async () => {
  const [, listening] = (await redis.pubsub('NUMSUB', `${prefix}invalidate`)) as [string, number | string]
  return Number(listening) === 1
})

const { account: parent, key: parentKey } = await sql.begin((tx) =>
  createParentWithKey(tx, { name: 'importer', externalId: null, extraScopes: [] }),
)
const externalIds: string[] = []
for (let i = 0; i < SUB_ACCOUNTS; i++) {
  const externalId = `customer-${i}`
  await createSubAccount(sql, parent.id, { name: externalId, externalId, metadata: {} })
  externalIds.push(externalId)
}

// Foreign keys as another gateway issued them; one in ten given by its SHA-256 only.
const keys: string[] = []
const lines: string[] = []
for (let i = 0; i < IMPORT_MAX_LINES; i++) {
  const key = `sk_live_${randomBytes(24).toString('base64url')}`
  keys.push(key)
  const given = i % 10 === 0 ? { key_sha256: createHash('sha256').update(key).digest('hex') } : { key }
  lines.push(
    JSON.stringify({ external_id: externalIds[i % SUB_ACCOUNTS], name: `key ${i}`, scopes: ['things:read'], ...given }),
  )
}
const body = `${lines.join('\n')}\n`

async function importFile(): Promise<{ status: number; summary: Record<string, number> | undefined; text: string }> {
  const res = await callAs(gateway.url, parentKey.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/api-keys/imports',
    acting: 'self',
    headers: [['Content-Type', 'application/x-ndjson']],
    body,
  }).catch((err: unknown) => {
    throw new Error(`the import failed (${String(err)}); the gateway wrote:\n${gateway.output().slice(-3000)}`)
  })
  const text = res.body
  const last = text.trimEnd().split('\n').at(-1) ?? ''
  return { status: res.status, summary: last.startsWith('{"summary"') ? JSON.parse(last).summary : undefined, text }
}

t.test(`${IMPORT_MAX_LINES} lines within a ${IMAGE_HEAP_MB} MiB heap: every key imported, then nothing`, async (t) => {
  const first = await importFile()
  t.equal(first.status, 200, 'answered')
  t.same(
    first.summary,
    { lines: IMPORT_MAX_LINES, imported: IMPORT_MAX_LINES, exists: 0, invalid: 0, dry_run: false },
    'every line imported',
  )
  const [{ n }] = (await sql`select count(*)::int as n from api_keys where origin = 'imported'`) as [{ n: number }]
  t.equal(n, IMPORT_MAX_LINES, 'each key written once')

  // A sample spread over the file (one in ten of them given by digest), each new to the gateway.
  const statuses: number[] = []
  for (let s = 0; s < SAMPLE; s++) {
    const key = keys[Math.floor((s * IMPORT_MAX_LINES) / SAMPLE) + (s % 10)]!
    statuses.push((await callAs(gateway.url, key, { path: '/things/1' })).status)
  }
  t.same(statuses, Array(SAMPLE).fill(200), `${SAMPLE} imported keys authenticate on a proxied route`)
  t.equal(upstream.received.length, SAMPLE, 'and reach the upstream')

  const again = await importFile()
  t.same(
    again.summary,
    { lines: IMPORT_MAX_LINES, imported: 0, exists: IMPORT_MAX_LINES, invalid: 0, dry_run: false },
    'the same file again imports nothing',
  )
  const [{ n: after }] = (await sql`select count(*)::int as n from api_keys where origin = 'imported'`) as [
    { n: number },
  ]
  t.equal(after, IMPORT_MAX_LINES, 'nothing written twice')
  t.equal(gateway.child.exitCode, null, 'the gateway still runs')
})

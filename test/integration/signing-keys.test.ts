// Signing keys (docs/credentials.md, Signing keys) on a real Postgres and Redis, in gateways built
// as the tests build every gateway: the first key made once however many replicas start at once,
// kept across restarts, the JWKS, the automatic rotation on a moved clock, and rotations reaching
// the other replicas over the bus and, without it, by their reload.
import { randomBytes } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { exportPKCS8 } from 'jose'
import pino from 'pino'
import t from 'tap'
import { seal } from '../../src/encryption/seal.js'
import { generateSigningKey, type Keyring } from '../../src/signing-keys/keyring.js'
import { DAY_MS, NEXT_KEY_LEAD_MS, RETIRED_KEY_GRACE_MS } from '../../src/signing-keys/schedule.js'
import { SigningKeyStore } from '../../src/signing-keys/store.js'
import { DEFAULT_RELOAD_INTERVAL_MS } from '../../src/signing-keys/sync.js'
import { insertSigningKey } from '../../src/store/signing-keys.js'
import { postgresAddress, startRelay, viaPort } from '../faults/relay.js'
import { freshDatabase, type TestDatabase } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually, sleep } from '../helpers/poll.js'

const ISSUER = 'http://localhost:8080'
const VERIFY = { typ: 'at+jwt', issuer: ISSUER, audience: ISSUER, clockToleranceSeconds: 30 }
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'k', 'oth']

const keyCount = async (db: TestDatabase): Promise<number> =>
  Number((await db.sql<{ n: string }[]>`select count(*)::text as n from signing_keys`)[0]!.n)

const sign = (keyring: Keyring, ttlSeconds = 900) =>
  keyring.sign({ iss: ISSUER, aud: ISSUER, sub: 'key-1' }, { typ: 'at+jwt', ttlSeconds })

const verifies = (keyring: Keyring, token: string): Promise<boolean> =>
  keyring.verify(token, VERIFY).then(
    () => true,
    () => false,
  )

async function jwks(
  app: FastifyInstance,
): Promise<{ kids: string[]; headers: Record<string, unknown>; keys: object[] }> {
  const response = await app.inject({ method: 'GET', url: '/.well-known/jwks.json' })
  if (response.statusCode !== 200) throw new Error(`JWKS answered ${response.statusCode}`)
  const { keys } = response.json() as { keys: { kid: string }[] }
  return { kids: keys.map((key) => key.kid), headers: response.headers, keys }
}

/** Lets the replicas' timers (every 50 ms) run a few times at the current clock. */
const settle = () => sleep(300)

const store = (db: TestDatabase, clock?: () => number) =>
  new SigningKeyStore({ sql: db.sql, encryptionKey: Buffer.from(TEST_ENCRYPTION_KEY, 'base64'), clock })

t.test('first start: one key, however many replicas start at once', async (t) => {
  const db = await freshDatabase(t)
  const replicas = await Promise.all(
    [1, 2, 3].map(() => startGateway(t, { listen: false, database: db, redis: false })),
  )
  t.equal(await keyCount(db), 1, 'exactly one key in the table')
  const kids = replicas.map((gw) => gw.app.keyring.signingKey().kid)
  t.same(new Set(kids).size, 1, 'every replica signs with it')
  const token = (await sign(replicas[0]!.app.keyring)).token
  for (const gw of replicas) t.ok(await verifies(gw.app.keyring, token), 'a token of one replica verifies on each')
})

t.test('of many first starts at once, one makes the key: the others wait for its lock', async (t) => {
  const db = await freshDatabase(t)
  const made = await Promise.all(Array.from({ length: 8 }, () => store(db).ensureSigningKey()))
  t.equal(made.filter((key) => key !== null).length, 1, 'one made it')
  t.equal(await keyCount(db), 1, 'one key in the table')
})

t.test('a restart with the same ENCRYPTION_KEY signs with the same key', async (t) => {
  const db = await freshDatabase(t)
  const first = await startGateway(t, { listen: false, database: db, redis: false })
  const kid = first.app.keyring.signingKey().kid
  const token = (await sign(first.app.keyring)).token
  await first.close()
  const again = await startGateway(t, { listen: false, database: db, redis: false })
  t.equal(again.app.keyring.signingKey().kid, kid)
  t.ok(await verifies(again.app.keyring, token), 'what it signed before the restart still verifies')
  t.equal(await keyCount(db), 1, 'no new key')
})

t.test('the JWKS: public parts only, cacheable five minutes, next key before it signs', async (t) => {
  const gw = await startGateway(t, { listen: false, redis: false })
  const active = gw.app.keyring.signingKey().kid
  const before = await jwks(gw.app)
  t.same(before.kids, [active])
  t.equal(before.headers['cache-control'], 'public, max-age=300')
  t.match(before.headers['content-type'], /^application\/json/)

  const next = await store(gw.database).rotate()
  t.equal(next.status, 'next')
  // The rotate is not announced here (no Redis): the gateway finds it on its next reload.
  gw.app.tenancyCache.clearLocal()
  const listed = await eventually(5_000, async () => (await jwks(gw.app)).kids.includes(next.kid))
  t.not(listed, null, 'the next key is published')
  const after = await jwks(gw.app)
  t.same(after.kids, [next.kid, active], 'next, then active')
  t.equal(gw.app.keyring.signingKey().kid, active, 'the next key does not sign yet')
  for (const key of after.keys) {
    t.same(Object.keys(key).sort(), ['alg', 'crv', 'kid', 'kty', 'use', 'x', 'y'])
    for (const member of PRIVATE_MEMBERS) t.notOk(member in key, `no "${member}"`)
  }
  const stored = await gw.sql<{ public_jwk: object }[]>`select public_jwk from signing_keys`
  for (const { public_jwk } of stored) t.notOk('d' in public_jwk, 'the stored public part has no "d" either')
})

t.test('automatic rotation on a moved clock, by one replica', async (t) => {
  const db = await freshDatabase(t)
  const start = Date.now()
  let now = start
  const clock = () => now
  const options = { listen: false, database: db, redis: false, signingKeys: { clock, reloadIntervalMs: 50 } } as const
  const [a, b] = [await startGateway(t, options), await startGateway(t, options)]
  const first = a.app.keyring.signingKey()
  t.equal(first.activatesAt, Math.floor(start / 1000) * 1000, 'the first key signs from its first start')
  const period = 30 * DAY_MS

  now = start + period - NEXT_KEY_LEAD_MS - 60_000
  await settle()
  t.equal(await keyCount(db), 1, 'not due a minute before the lead')

  now = start + period - NEXT_KEY_LEAD_MS + 1_000
  const published = now
  const rotated = await eventually(
    10_000,
    async () => (await jwks(a.app)).kids.length === 2 && (await jwks(b.app)).kids.length === 2,
  )
  t.not(rotated, null, 'a next key is published on both replicas')
  await settle()
  t.equal(await keyCount(db), 2, 'one new key, though both replicas found it due')
  const next = a.app.keyring.keys().find((key) => key.kid !== first.kid)!
  t.ok(next.activatesAt - published >= NEXT_KEY_LEAD_MS, 'published at least 10 minutes before it signs')
  t.equal(next.activatesAt, Math.ceil((published + NEXT_KEY_LEAD_MS) / 1000) * 1000)
  t.same((await jwks(a.app)).kids, [next.kid, first.kid])

  now = next.activatesAt - 1
  const lastOfFirst = await sign(a.app.keyring, 3600)
  t.equal(lastOfFirst.kid, first.kid, 'the old key signs until the next one activates')
  now = next.activatesAt
  t.equal(a.app.keyring.signingKey().kid, next.kid, 'then the next one signs')
  t.equal(b.app.keyring.signingKey().kid, next.kid, 'on both replicas')
  t.same((await jwks(b.app)).kids, [next.kid, first.kid], 'the retired key stays published')

  const [row] = await db.sql<{ published_until: Date }[]>`
    select published_until from signing_keys where kid = ${first.kid}`
  t.equal(row!.published_until.getTime(), next.activatesAt + RETIRED_KEY_GRACE_MS)
  t.equal(RETIRED_KEY_GRACE_MS, (3600 + 30) * 1000, 'the longest token, 3600 s, and the 30 s leeway')

  const lifeEnds = lastOfFirst.expiresAt * 1000 + 30_000
  t.ok(lifeEnds <= next.activatesAt + RETIRED_KEY_GRACE_MS, 'its last token, leeway included, ends before it leaves')
  now = lifeEnds - 1
  t.ok(await verifies(b.app.keyring, lastOfFirst.token), 'its last token verifies to the end of its life')
  now = next.activatesAt + RETIRED_KEY_GRACE_MS - 1
  t.ok((await jwks(b.app)).kids.includes(first.kid), 'published until then')
  now = next.activatesAt + RETIRED_KEY_GRACE_MS
  t.same((await jwks(b.app)).kids, [next.kid], 'then it leaves the JWKS')
  t.notOk(b.app.keyring.accepts(first.kid))
  const dropped = await eventually(10_000, async () => b.app.keyring.keys().length === 1)
  t.not(dropped, null, 'the next reload drops it from the keyring')
})

t.test('a stored key that ENCRYPTION_KEY cannot open: logged, and the keys held are kept', async (t) => {
  const lines: string[] = []
  const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(line) })
  const gw = await startGateway(t, { listen: false, redis: false, logger })
  const kid = gw.app.keyring.signingKey().kid
  const stranger = await generateSigningKey(Date.now() + NEXT_KEY_LEAD_MS)
  const pkcs8 = Buffer.from(await exportPKCS8(stranger.privateKey!), 'utf8')
  await gw.sql.begin((tx) =>
    insertSigningKey(tx, {
      kid: stranger.kid,
      publicJwk: stranger.publicJwk,
      sealedPrivateKey: seal(randomBytes(32), pkcs8, stranger.kid),
      createdAt: new Date(),
      activatesAt: new Date(stranger.activatesAt),
    }),
  )
  gw.app.tenancyCache.clearLocal()
  const logged = await eventually(5_000, async () => lines.some((line) => line.includes('ENCRYPTION_KEY')))
  t.not(logged, null, 'an error that names ENCRYPTION_KEY')
  t.match(JSON.parse(lines.find((line) => line.includes('ENCRYPTION_KEY'))!), { level: 50 })
  t.notOk(gw.app.keyring.accepts(stranger.kid), 'the key it cannot open is not taken')
  t.equal(gw.app.keyring.signingKey().kid, kid, 'the key it holds still signs')
})

t.test('Postgres away: the keys held keep signing, the reload is tried again until it answers', async (t) => {
  const db = await freshDatabase(t)
  const relay = await startRelay(t, postgresAddress())
  const lines: string[] = []
  const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(line) })
  const gw = await startGateway(t, {
    listen: false,
    database: db,
    redis: false,
    pool: { url: viaPort(db.url, relay.port) },
    relays: [relay],
    logger,
    signingKeys: { reloadIntervalMs: 50 },
  })
  const kid = gw.app.keyring.signingKey().kid
  await relay.cut()
  const warned = await eventually(10_000, async () =>
    lines.some((line) => line.includes('cannot load the signing keys')),
  )
  t.not(warned, null, 'a warning, not a crash')
  t.equal(gw.app.keyring.signingKey().kid, kid, 'the key held still signs')
  await relay.restore()
  const next = await store(db).rotate()
  t.not(await eventually(10_000, async () => gw.app.keyring.accepts(next.kid)), null, 'loaded once Postgres answers')
})

t.test('no key loaded yet: the JWKS is 503, not an empty set to cache for five minutes', async (t) => {
  const db = await freshDatabase(t)
  const relay = await startRelay(t, postgresAddress())
  await relay.cut()
  const gw = await startGateway(t, {
    listen: false,
    database: db,
    redis: false,
    pool: { url: viaPort(db.url, relay.port) },
    relays: [relay],
  })
  const empty = await gw.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })
  t.equal(empty.statusCode, 503, 'a verifier or a shared cache must not keep "no keys"')
  t.equal(empty.json().code, 'store_unavailable')
  t.notOk(String(empty.headers['cache-control'] ?? '').includes('public'), 'not cacheable')
  await relay.restore()
  const loaded = await eventually(10_000, async () => (await jwks(gw.app).catch(() => null))?.kids.length === 1)
  t.not(loaded, null, 'the set once the keys are loaded')
})

t.test('a rotation reaches a replica without the bus, by its reload', async (t) => {
  t.ok(DEFAULT_RELOAD_INTERVAL_MS < 60_000, 'the default reload is within the 60 s promised')
  const db = await freshDatabase(t)
  const options = { listen: false, database: db, redis: false, signingKeys: { reloadIntervalMs: 200 } } as const
  const a = await startGateway(t, options)
  const before = a.app.keyring.signingKey().kid
  const { kid } = await store(db).rotate()
  const seen = await eventually(10_000, async () => a.app.keyring.accepts(kid))
  t.not(seen, null, 'the next key is loaded without any message')

  const token = (await sign(a.app.keyring)).token
  const { signing_key } = await store(db).rotateCompromised()
  const refused = await eventually(10_000, async () => !(await verifies(a.app.keyring, token)))
  t.not(refused, null, 'a withdrawn key is refused without any message')
  t.equal(a.app.keyring.signingKey().kid, signing_key.kid)
  t.notOk(a.app.keyring.accepts(before))
})

t.test('--compromised withdraws every published key, retired ones too', async (t) => {
  const db = await freshDatabase(t)
  const start = Date.now()
  let now = start
  const keys = store(db, () => now)
  const first = (await keys.rotate()).kid
  const next = await keys.rotate()
  t.not(next.kid, first)
  // The next key signs: the first one is retired, still published for its tokens' sake.
  now = Date.parse(next.activates_at) + 1_000
  const { signing_key: fresh, withdrawn } = await keys.rotateCompromised()
  t.same(
    withdrawn.map((key) => key.kid),
    [first, next.kid],
    'the retired key is withdrawn with the one that signed: its private part could sign new tokens',
  )
  const published = await db.sql<{ kid: string }[]>`
    select kid from signing_keys where withdrawn_at is null and published_until is null`
  t.same(
    published.map((row) => row.kid),
    [fresh.kid],
    'only the fresh key is left',
  )
})

t.test('rotate: the next key signs the whole lead after it is made, however long the rotation takes', async (t) => {
  const db = await freshDatabase(t)
  // Every reading of the clock a second later, at half past: a rotation that read the clock
  // again after choosing when the key signs would date the key later than that choice allows.
  let now = Date.parse('2026-11-23T08:00:00.500Z')
  const keys = store(db, () => (now += 1_000))
  await keys.rotate()
  const next = await keys.rotate()
  const lead = Date.parse(next.activates_at) - Date.parse(next.created_at)
  t.equal(next.status, 'next')
  t.ok(
    lead >= NEXT_KEY_LEAD_MS && lead < NEXT_KEY_LEAD_MS + 1_000,
    `signs the lead after it was made, on a whole second (${lead} ms)`,
  )
})

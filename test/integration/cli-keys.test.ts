// The CLI's key lifecycle (docs/configuration.md; docs/credentials.md, key lifecycle): parent keys
// created with an expiry and rolled, the commands run in process (test/helpers/cli.ts) against a
// real Postgres, with a gateway on the same database and Redis prefix. The gateway keeps records
// in-process for a minute, so that only the CLI's message on the invalidation bus can make it
// refuse a rolled key at once.
import t from 'tap'
import { cli } from '../helpers/cli.js'
import { freshDatabase } from '../helpers/db.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { REDIS_URL, redisClient, redisPrefix, untilSubscribed } from '../helpers/redis.js'

const DAY_MS = 86_400_000

const db = await freshDatabase(t)
const keyPrefix = redisPrefix(t)
const gw = await startGateway(t, {
  listen: false,
  database: db,
  redisKeyPrefix: keyPrefix,
  cacheTimings: { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 },
})
const { ok, fails } = cli({ DATABASE_URL: db.url, REDIS_URL, REDIS_KEY_PREFIX: keyPrefix })
const parent = await gw.createParent()

// The gateway must be subscribed before the CLI publishes.
const redis = redisClient(t)
await untilSubscribed(redis, keyPrefix!, 1)

/** A management read with `apiKey`: 200 while the key works. */
const read = (apiKey: string) => gw.call(apiKey, { method: 'GET', url: '/v1/sub-accounts', acting: 'self' })
const keysTable = () => db.sql`select id, status, expires_at, revoked_at, rolled_from from api_keys order by seq`

t.test('keys create --expires-at: stored, printed, and the key works until then', async (t) => {
  const at = Date.now() + 3_600_000
  const local = new Date(at + 2 * 3_600_000).toISOString().replace('Z', '+02:00')
  const out = await ok(t, ['keys', 'create', '--account', parent.id, '--name', 'expiring', '--expires-at', local])
  t.match(out.key, { name: 'expiring', status: 'active', expires_at: new Date(at).toISOString(), rolled_from: null })
  const [row] = await db.sql`select expires_at from api_keys where id = ${out.key.id}`
  t.equal((row!.expires_at as Date).getTime(), at)
  t.equal((await read(out.api_key)).statusCode, 200, 'the key works')
  const plain = await ok(t, ['keys', 'create', '--account', parent.id, '--name', 'forever'])
  t.equal(plain.key.expires_at, null, 'without --expires-at: never')
})

t.test('keys create: a bad --expires-at is one line, exit 1, and nothing changes', async (t) => {
  const before = await keysTable()
  const later = new Date()
  later.setUTCFullYear(later.getUTCFullYear() + 11)
  for (const [value, message] of [
    [new Date(Date.now() - 60_000).toISOString(), /^error: --expires-at must be in the future$/],
    [later.toISOString(), /^error: --expires-at must be at most 10 years ahead$/],
    ['next tuesday', /^error: --expires-at must be an RFC 3339 date-time/],
  ] as const) {
    await fails(t, ['keys', 'create', '--account', parent.id, '--name', 'x', '--expires-at', value], message)
  }
  t.same(await keysTable(), before, 'no key was made')
})

t.test('keys roll: the new key like the old one, the old one kept a day by default', async (t) => {
  const expiresAt = new Date(Date.now() + 30 * DAY_MS).toISOString()
  const old = await ok(t, [
    'keys',
    'create',
    '--account',
    parent.id,
    '--name',
    'rolled',
    '--scopes',
    'sub_accounts:read',
    '--expires-at',
    expiresAt,
  ])
  const before = Date.now()
  const out = await ok(t, ['keys', 'roll', '--account', parent.id, '--key', old.key.id])
  t.same(Object.keys(out).sort(), ['api_key', 'key', 'previous_key'])
  t.match(out.key, {
    name: 'rolled',
    scopes: ['sub_accounts:read'],
    status: 'active',
    expires_at: expiresAt,
    rolled_from: old.key.id,
    prefix: out.api_key.slice(0, 12),
  })
  t.not(out.key.id, old.key.id)
  t.notOk('client_secret' in out, 'parent keys have no client secret')
  t.match(out.previous_key, { id: old.key.id, status: 'active', revoked_at: null })
  const oldExpiry = Date.parse(out.previous_key.expires_at)
  t.ok(oldExpiry >= before + DAY_MS - 1 && oldExpiry <= Date.now() + DAY_MS, 'the old key has a day left')
  t.equal((await read(out.api_key)).statusCode, 200, 'the new key works')
  t.equal((await read(old.api_key)).statusCode, 200, 'the old key still works')
})

t.test('keys roll --expires-in-seconds 0: the gateway refuses the old key at once', async (t) => {
  const old = await ok(t, ['keys', 'create', '--account', parent.id, '--name', 'leaked'])
  t.equal((await read(old.api_key)).statusCode, 200, 'the gateway knows the old key')
  const out = await ok(t, ['keys', 'roll', '--account', parent.id, '--key', old.key.id, '--expires-in-seconds', '0'])
  t.match(out.previous_key, { id: old.key.id, status: 'revoked' })
  t.ok(out.previous_key.revoked_at, 'revoked_at is set')
  let status = 0
  const took = await eventually(1_000, async () => {
    status = (await read(old.api_key)).statusCode
    return status === 401
  })
  t.not(took, null, `the old key is refused within 1 s (last: ${status})`)
  t.equal((await read(old.api_key)).json().code, 'unauthenticated')
  t.equal((await read(out.api_key)).statusCode, 200, 'the new key works')
})

t.test('keys roll: bad values, a revoked or unknown key: one line, exit 1, nothing changes', async (t) => {
  const live = await ok(t, ['keys', 'create', '--account', parent.id, '--name', 'live'])
  const revoked = await ok(t, ['keys', 'create', '--account', parent.id, '--name', 'revoked'])
  await ok(t, ['keys', 'revoke', '--account', parent.id, '--key', revoked.key.id])
  const before = await keysTable()
  const roll = (key: string, ...extra: string[]) => ['keys', 'roll', '--account', parent.id, '--key', key, ...extra]
  const badSeconds = /^error: --expires-in-seconds must be a whole number of seconds from 0 to 2592000$/
  for (const value of ['-1', '2592001', '1.5', 'abc', ''])
    await fails(t, roll(live.key.id, `--expires-in-seconds=${value}`), badSeconds)
  await fails(t, roll(revoked.key.id), /^error: key \S+ is revoked: only an active key can be rolled$/)
  await fails(t, roll('00000000-0000-4000-8000-000000000000'), /^error: account \S+ has no key \S+$/)
  await fails(t, ['keys', 'roll', '--account', parent.id], /^error: --key is required$/)
  t.same(await keysTable(), before, 'no key was made or changed')
})

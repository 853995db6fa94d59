// The operator CLI (docs/configuration.md) against a real Postgres and Redis: its commands run in
// process (test/helpers/cli.ts), and the keys they print are then used against the app. The last
// test runs the entry as an operator does, `npm run --silent cli -- ...` from the repository root.
import { createHash } from 'node:crypto'
import t, { type Test } from 'tap'
import { cli, runCliProcess } from '../helpers/cli.js'
import { freshDatabase } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { REDIS_URL, redisPrefix } from '../helpers/redis.js'

const MANAGEMENT = ['sub_accounts:read', 'sub_accounts:write']
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const db = await freshDatabase(t)
// The app caches keys in-process; a revocation through the CLI reaches it over Redis.
const keyPrefix = redisPrefix(t)
const gw = await startGateway(t, { listen: false, database: db, redisKeyPrefix: keyPrefix })
const env = { DATABASE_URL: db.url, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, REDIS_URL, REDIS_KEY_PREFIX: keyPrefix }
const { ok: cliOk, fails: cliFails } = cli(env)

function call(apiKey: string, method: 'GET' | 'POST', body?: unknown) {
  return gw.call(apiKey, { method, url: '/v1/sub-accounts', acting: 'self', body })
}

const sha256 = (value: string) => createHash('sha256').update(value).digest()

let acme: { id: string; apiKey: string; keyId: string }

t.test('accounts create: a parent account and its first key', async (t) => {
  const out = await cliOk(t, [
    'accounts',
    'create',
    '--name',
    'Acme',
    '--external-id',
    'acme',
    '--scopes',
    'tracking:read',
  ])
  t.same(Object.keys(out).sort(), ['account', 'api_key', 'key'], 'account, api_key and key, nothing else')
  t.match(out.account, { id: UUID, name: 'Acme', external_id: 'acme', created_at: ISO })
  t.match(out.api_key, /^tgw_[0-9A-Za-z]{49}$/)
  t.match(out.key, {
    id: UUID,
    name: String,
    status: 'active',
    created_at: ISO,
    revoked_at: null,
    prefix: out.api_key.slice(0, 12),
  })
  t.same(out.key.scopes, [...MANAGEMENT, 'tracking:read'], 'the two management scopes plus the given ones')
  t.notOk('key_digest' in out.key, 'no digest in the output')

  const [tenant] =
    await db.sql`select id, parent_id, name, external_id, status from tenants where id = ${out.account.id}`
  t.same(
    tenant,
    { id: out.account.id, parent_id: null, name: 'Acme', external_id: 'acme', status: 'active' },
    'a parent account',
  )

  const [row] = await db.sql<
    { tenant_id: string; key_digest: Buffer; prefix: string; scopes: string[]; secret_digest: Buffer | null }[]
  >`
    select tenant_id, key_digest, prefix, to_jsonb(scopes) as scopes, secret_digest from api_keys where id = ${out.key.id}`
  t.ok(row, 'the key is stored')
  t.equal(row!.tenant_id, out.account.id)
  t.ok(Buffer.isBuffer(row!.key_digest) && row!.key_digest.length === 32, 'a 32-byte key_digest')
  t.ok(row!.key_digest.equals(sha256(out.api_key)), 'key_digest = sha256(api_key)')
  t.equal(row!.prefix, out.api_key.slice(0, 12), 'prefix is the first 12 characters only')
  t.same(row!.scopes, [...MANAGEMENT, 'tracking:read'])

  // The value itself appears nowhere: not in any column of the key row nor of the account row,
  // neither as text nor as the hex of its bytes.
  const secretPart = out.api_key.slice(12)
  const keyHex = Buffer.from(out.api_key).toString('hex')
  const dumps = await db.sql<{ text: string }[]>`
    select row_to_json(k)::text as text from api_keys k where k.tenant_id = ${out.account.id}
    union all
    select row_to_json(a)::text from tenants a where a.id = ${out.account.id}`
  t.equal(dumps.length, 2)
  for (const { text } of dumps) {
    t.notOk(text.includes(out.api_key), 'the key value is not stored')
    t.notOk(text.includes(secretPart), 'no part of the key past the prefix is stored')
    t.notOk(text.toLowerCase().includes(keyHex), 'the key is not stored as bytes')
  }

  acme = { id: out.account.id, apiKey: out.api_key, keyId: out.key.id }
})

t.test('the printed key authenticates', async (t) => {
  const res = await call(acme.apiKey, 'GET')
  t.equal(res.statusCode, 200, res.body)
  t.same(res.json().data, [], 'no sub-accounts yet')
  const created = await call(acme.apiKey, 'POST', { name: 'from the cli key' })
  t.equal(created.statusCode, 201, created.body)
})

t.test('keys create', async (t) => {
  t.test('defaults to the two sub_accounts scopes', async (t) => {
    const out = await cliOk(t, ['keys', 'create', '--account', acme.id, '--name', 'ci'])
    t.same(Object.keys(out).sort(), ['api_key', 'key'])
    t.match(out.key, { id: UUID, name: 'ci', status: 'active', prefix: out.api_key.slice(0, 12), revoked_at: null })
    t.same(out.key.scopes, MANAGEMENT, 'exactly the two sub_accounts scopes')
    const [row] = await db.sql<{ tenant_id: string; key_digest: Buffer }[]>`
      select tenant_id, key_digest from api_keys where id = ${out.key.id}`
    t.equal(row!.tenant_id, acme.id, 'a key of that account')
    t.ok(row!.key_digest.equals(sha256(out.api_key)))
    t.equal((await call(out.api_key, 'GET')).statusCode, 200, 'the key works')
  })

  t.test('--scopes gives exactly the scopes given', async (t) => {
    const out = await cliOk(t, [
      'keys',
      'create',
      '--account',
      acme.id,
      '--name',
      'reader',
      '--scopes',
      'sub_accounts:read',
    ])
    t.same(out.key.scopes, ['sub_accounts:read'], 'exactly that one scope')
    t.equal((await call(out.api_key, 'GET')).statusCode, 200, 'it can read')
    const res = await call(out.api_key, 'POST', { name: 'nope' })
    t.equal(res.statusCode, 403, res.body)
    t.equal(res.json().code, 'insufficient_scope')
  })

  t.test('an upper-case account UUID names the same account', async (t) => {
    const out = await cliOk(t, ['keys', 'create', '--account', acme.id.toUpperCase(), '--name', 'upper'])
    const [row] = await db.sql`select tenant_id from api_keys where id = ${out.key.id}`
    t.equal(row!.tenant_id, acme.id)
  })
})

t.test('keys revoke', async (t) => {
  const minted = await cliOk(t, ['keys', 'create', '--account', acme.id, '--name', 'to-revoke'])
  t.equal((await call(minted.api_key, 'GET')).statusCode, 200, 'works before revocation')

  const out = await cliOk(t, ['keys', 'revoke', '--account', acme.id, '--key', minted.key.id])
  t.same(Object.keys(out), ['key'])
  t.match(out.key, { id: minted.key.id, status: 'revoked', revoked_at: ISO })
  const [row] = await db.sql`select status, revoked_at from api_keys where id = ${minted.key.id}`
  t.equal(row!.status, 'revoked')

  const res = await call(minted.api_key, 'GET')
  t.equal(res.statusCode, 401, 'the very next request is refused')
  t.equal(res.json().code, 'unauthenticated')

  t.equal((await call(acme.apiKey, 'GET')).statusCode, 200, 'other keys of the account still work')

  const again = await cliOk(t, ['keys', 'revoke', '--account', acme.id, '--key', minted.key.id])
  t.equal(again.key.revoked_at, out.key.revoked_at, 'revoking again keeps the first revocation time')
})

t.test('errors: non-zero exit, one line on stderr, nothing on stdout', async (t) => {
  const unknownAccount = '00000000-0000-4000-8000-000000000000'
  const before =
    await db.sql`select (select count(*) from tenants)::int as tenants, (select count(*) from api_keys)::int as keys`

  t.test('accounts create without --name', async (t) => {
    await cliFails(t, ['accounts', 'create'], /--name/)
  })
  t.test('accounts create with a blank --name', async (t) => {
    await cliFails(t, ['accounts', 'create', '--name', '   '], /--name/)
  })
  t.test('a bad --external-id', async (t) => {
    await cliFails(t, ['accounts', 'create', '--name', 'Bad', '--external-id', 'has space'], /--external-id/)
    await cliFails(t, ['accounts', 'create', '--name', 'Bad', '--external-id', 'x'.repeat(129)], /--external-id/)
  })
  t.test('a bad scope name', async (t) => {
    await cliFails(t, ['accounts', 'create', '--name', 'Bad', '--scopes', 'Not A Scope'], /--scopes/)
  })
  t.test('an unknown command', async (t) => {
    await cliFails(t, ['frobnicate'], /usage/)
    await cliFails(t, ['accounts', 'delete', '--name', 'x'], /usage/)
  })
  t.test('no command at all', async (t) => {
    await cliFails(t, [], /usage/)
  })
  t.test('an unknown option', async (t) => {
    await cliFails(t, ['accounts', 'create', '--name', 'x', '--colour', 'red'])
  })
  t.test('keys create for an unknown account', async (t) => {
    await cliFails(t, ['keys', 'create', '--account', unknownAccount, '--name', 'ci'], new RegExp(unknownAccount))
  })
  t.test('keys create for a sub-account (not a parent)', async (t) => {
    const [sub] = await db.sql`select id from tenants where parent_id = ${acme.id} limit 1`
    t.ok(sub, 'acme has a sub-account')
    await cliFails(t, ['keys', 'create', '--account', sub!.id, '--name', 'ci'])
  })
  t.test('a duplicate parent external id', async (t) => {
    await cliFails(t, ['accounts', 'create', '--name', 'Acme again', '--external-id', 'acme'], /external id/)
  })
  t.test('--account not-a-uuid', async (t) => {
    await cliFails(t, ['keys', 'create', '--account', 'not-a-uuid', '--name', 'ci'], /--account/)
    await cliFails(t, ['keys', 'revoke', '--account', 'not-a-uuid', '--key', acme.keyId], /--account/)
  })
  t.test('keys revoke: a bad or foreign key id', async (t) => {
    await cliFails(t, ['keys', 'revoke', '--account', acme.id, '--key', 'not-a-uuid'], /--key/)
    await cliFails(t, ['keys', 'revoke', '--account', acme.id, '--key', unknownAccount])
    const other = await cliOk(t, ['accounts', 'create', '--name', 'Other'])
    await cliFails(t, ['keys', 'revoke', '--account', other.account.id, '--key', acme.keyId])
    const [row] = await db.sql`select status from api_keys where id = ${acme.keyId}`
    t.equal(row!.status, 'active', "another account's key is untouched")
  })

  t.test('a failed command changed nothing', async (t) => {
    const after =
      await db.sql`select (select count(*) from tenants)::int as tenants, (select count(*) from api_keys)::int as keys`
    // Only the "Other" account and its first key were created on purpose above.
    t.same(after[0], { tenants: before[0]!.tenants + 1, keys: before[0]!.keys + 1 })
  })
})

t.test('accounts limits', async (t) => {
  // A second replica whose in-process entries would live a minute: only the CLI's message can
  // make it see the new limits within a second.
  const replica = await startGateway(t, {
    listen: false,
    database: db,
    redisKeyPrefix: keyPrefix,
    cacheTimings: { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 },
  })
  const cached = async () => (await replica.app.tenancyCache.lookups.tenant(acme.id))?.limits ?? null
  const stored = async () => (await db.sql`select limits from tenants where id = ${acme.id}`)[0]!.limits
  const rate = { requests: 100, per_seconds: 1 }
  const quota = { requests: 5000 }

  t.equal(await cached(), null, 'the replica holds the account, without limits')

  /** Runs the command, checks what it printed and stored, and that the replica has it within 1 s of its exit. */
  async function setsLimits(t: Test, flags: string[], limits: unknown) {
    const out = await cliOk(t, ['accounts', 'limits', '--account', acme.id, ...flags])
    t.same(Object.keys(out), ['account'])
    t.match(out.account, { id: acme.id, name: 'Acme', external_id: 'acme', created_at: ISO })
    t.same(out.account.limits, limits, `printed: ${flags.join(' ')}`)
    const none = { rate: null, monthly_quota: null }
    t.same((await stored()) ?? none, limits, 'stored')
    const took = await eventually(1_000, async () => {
      const seen = await cached()
      return JSON.stringify(seen ?? none) === JSON.stringify(limits)
    })
    t.ok(took !== null, `the replica's cached record has them within 1 s (${took} ms after the CLI exited)`)
  }

  await setsLimits(t, ['--rate', '100/1s'], { rate, monthly_quota: null })
  await setsLimits(t, ['--monthly-quota', '5000'], { rate, monthly_quota: quota })
  await setsLimits(t, ['--rate', '10/60s'], { rate: { requests: 10, per_seconds: 60 }, monthly_quota: quota })
  await setsLimits(t, ['--rate', '100/1s', '--monthly-quota', '5000'], { rate, monthly_quota: quota })

  const shown = await gw.call(acme.apiKey, { method: 'GET', url: '/v1/sub-accounts/limits', acting: 'self' })
  t.equal(shown.statusCode, 200, shown.body)
  t.same(shown.json().account, { rate, monthly_quota: quota }, 'GET /v1/sub-accounts/limits shows them')

  t.test('bad values: an error line, exit 1, nothing changed', async (t) => {
    const [sub] = await db.sql`select id from tenants where parent_id = ${acme.id} limit 1`
    const cases: [string[], RegExp][] = [
      [['--rate', '0/1s'], /--rate/],
      [['--rate', '1000000001/1s'], /--rate/],
      [['--rate', '5/3601s'], /--rate/],
      [['--rate', 'fast'], /--rate/],
      [['--monthly-quota', '0'], /--monthly-quota/],
      [['--monthly-quota', '1e9'], /--monthly-quota/],
      [['--monthly-quota', '5000', '--clear'], /--clear/],
      [[], /--rate|--clear/],
    ]
    for (const [flags, message] of cases) {
      const line = await cliFails(t, ['accounts', 'limits', '--account', acme.id, ...flags], message)
      t.match(line, /^error: /)
    }
    await cliFails(t, ['accounts', 'limits', '--account', sub!.id, '--rate', '1/1s'], /sub-account/)
    await cliFails(
      t,
      ['accounts', 'limits', '--account', '00000000-0000-4000-8000-000000000000', '--clear'],
      /no parent/,
    )
    await cliFails(t, ['accounts', 'limits', '--account', 'nope', '--clear'], /--account/)
    t.same(await stored(), { rate, monthly_quota: quota }, "the account's limits are unchanged")
    t.equal(
      (await db.sql`select limits from tenants where id = ${sub!.id}`)[0]!.limits,
      null,
      'the sub-account has none',
    )
  })

  t.test('--clear removes both', async (t) => {
    await setsLimits(t, ['--clear'], { rate: null, monthly_quota: null })
    t.equal(await stored(), null, 'stored as null')
  })
})

t.test('the entry, as an operator runs it: npm run --silent cli -- ...', async (t) => {
  const shell = { ...process.env, ...env }
  const made = await runCliProcess(['keys', 'create', '--account', acme.id, '--name', 'from the entry'], shell)
  t.equal(made.code, 0, `exit 0 (stderr: ${made.stderr.trim()})`)
  t.equal(made.stderr, '', 'nothing on stderr')
  t.match(made.stdout, /^\{.*\}\n$/, 'one JSON object on one line of stdout')
  const out = JSON.parse(made.stdout)
  t.match(out.key, { id: UUID, name: 'from the entry', status: 'active', prefix: out.api_key.slice(0, 12) })
  const [row] = await db.sql<{ tenant_id: string; key_digest: Buffer }[]>`
    select tenant_id, key_digest from api_keys where id = ${out.key.id}`
  t.equal(row!.tenant_id, acme.id, 'stored for that account')
  t.ok(row!.key_digest.equals(sha256(out.api_key)))
  t.equal((await call(out.api_key, 'GET')).statusCode, 200, 'the key works')

  const unknown = '00000000-0000-4000-8000-000000000000'
  const refused = await runCliProcess(['keys', 'create', '--account', unknown, '--name', 'x'], shell)
  t.equal(refused.code, 1, 'exit 1')
  t.equal(refused.stdout, '', 'nothing on stdout')
  t.equal(refused.stderr, `error: no parent account ${unknown}\n`, 'one line on stderr')
})

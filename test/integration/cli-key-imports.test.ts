// `cli -- keys import --account <uuid> --file keys.ndjson` (docs/key-imports.md): a parent
// account's own keys from elsewhere, run in process (test/helpers/cli.ts) against a real Postgres,
// with a gateway on the same database and Redis prefix. The gateway keeps records in-process for a
// minute, so that only the CLI's message can make a value it refused before the import work at once.
import { randomBytes } from 'node:crypto'
import { mkdtemp, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { cli } from '../helpers/cli.js'
import { freshDatabase } from '../helpers/db.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { REDIS_URL, redisClient, redisPrefix, untilSubscribed } from '../helpers/redis.js'

const db = await freshDatabase(t)
const keyPrefix = redisPrefix(t)
const gw = await startGateway(t, {
  listen: false,
  database: db,
  redisKeyPrefix: keyPrefix,
  cacheTimings: { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 },
})
const { run, fails } = cli({ DATABASE_URL: db.url, REDIS_URL, REDIS_KEY_PREFIX: keyPrefix })
const parent = await gw.createParent()
await untilSubscribed(redisClient(t), keyPrefix!, 1)
const dir = await mkdtemp(join(tmpdir(), 'tgw-key-imports-'))

const read = (apiKey: string) => gw.call(apiKey, { method: 'GET', url: '/v1/sub-accounts', acting: 'self' })
const countKeys = async () => (await db.sql`select count(*)::int as n from api_keys`)[0]!.n as number

async function file(lines: unknown[]): Promise<string> {
  const path = join(dir, `${randomBytes(6).toString('hex')}.ndjson`)
  await writeFile(path, lines.map((l) => `${JSON.stringify(l)}\n`).join(''))
  return path
}

t.test("keys import: the account's own keys, a result a line, then the summary; again, nothing twice", async (t) => {
  const key = `legacy-${randomBytes(18).toString('base64url')}`
  t.equal((await read(key)).statusCode, 401, 'refused before its import (and kept as unknown)')
  const path = await file([
    { name: 'legacy', scopes: ['sub_accounts:read'], key },
    { sub_account_id: parent.id, name: 'x', scopes: ['sub_accounts:read'], key: `${key}-2` },
  ])
  const dry = await run(['keys', 'import', '--account', parent.id, '--file', path, '--dry-run'])
  t.equal(dry.code, 0, dry.stderr)
  t.match(dry.stdout, /"dry_run":true/)
  t.equal((await read(key)).statusCode, 401, 'a dry run writes nothing')
  const done = await run(['keys', 'import', '--account', parent.id, '--file', path])
  t.equal(done.code, 0, done.stderr)
  t.equal(done.stderr, '')
  const lines = done.stdout
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l))
  t.match(lines[0], { line: 1, status: 'imported', key_id: String })
  t.match(lines[1], { line: 2, status: 'invalid', error: /own keys: leave out sub_account_id/ })
  t.same(lines[2], { summary: { lines: 2, imported: 1, exists: 0, invalid: 1, dry_run: false } })
  t.not(await eventually(1_000, async () => (await read(key)).statusCode === 200), null, 'the key works at once')
  const [row] = await db.sql`select tenant_id, origin, prefix from api_keys where id = ${lines[0].key_id}`
  t.same(row, { tenant_id: parent.id, origin: 'imported', prefix: 'lega' })
  const before = await countKeys()
  const again = await run(['keys', 'import', '--account', parent.id, '--file', path])
  t.match(again.stdout.split('\n')[0], /"status":"exists"/)
  t.equal(await countKeys(), before, 'nothing imported twice')
})

t.test('keys import: a missing file or account is one line, exit 1, and nothing changes', async (t) => {
  const before = await countKeys()
  await fails(t, ['keys', 'import', '--account', parent.id], /^error: --file is required$/)
  await fails(t, ['keys', 'import', '--account', parent.id, '--file', join(dir, 'none.ndjson')], /cannot be read/)
  const path = await file([{ name: 'x', scopes: ['a:b'], key: 'k'.repeat(20) }])
  await fails(
    t,
    ['keys', 'import', '--account', '00000000-0000-4000-8000-000000000000', '--file', path],
    /no parent account/,
  )
  t.equal(await countKeys(), before)
})

t.test('accounts leak-policy: set, its event, and a bad value refused with nothing changed', async (t) => {
  const policy = async () =>
    (await db.sql`select leak_policy from tenants where id = ${parent.id}`)[0]!.leak_policy as string
  t.equal(await policy(), 'revoke', 'revoke by default')
  await fails(t, ['accounts', 'leak-policy', '--account', parent.id, '--policy', 'never'], /--policy must be revoke/)
  t.equal(await policy(), 'revoke', 'unchanged')
  const done = await run(['accounts', 'leak-policy', '--account', parent.id, '--policy', 'alert'])
  t.equal(done.code, 0, done.stderr)
  t.match(JSON.parse(done.stdout), { account: { id: parent.id, leak_policy: 'alert' } })
  t.equal(await policy(), 'alert')
  const events =
    await db.sql`select actor, data from events where account_id = ${parent.id} and type = 'account.settings_updated'`
  t.equal(events.length, 1)
  t.match(events[0], { actor: { type: 'operator' }, data: { previous: { leak_policy: 'revoke' } } })
  await run(['accounts', 'leak-policy', '--account', parent.id, '--policy', 'alert'])
  const again =
    await db.sql`select count(*)::int as n from events where account_id = ${parent.id} and type = 'account.settings_updated'`
  t.equal(again[0]!.n, 1, 'the same again writes no event')
})

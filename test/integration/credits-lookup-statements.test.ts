// A tenant's lookup on a cache miss (store/tenancy-lookups.ts) reads a sub-account's grants in the
// statement that reads the sub-account (docs/api.md, Credits): one statement, whether it has
// credits or not, counted as postgres.js sends them (its debug hook). A second statement for the
// grants of every sub-account looked up was a Postgres round trip more per cache miss. And that
// statement reads a sub-account's grants by index, not the whole table (migration 033).
import { randomUUID } from 'node:crypto'
import postgres from 'postgres'
import t from 'tap'
import type { Sql } from '../../src/store/db.js'
import { insertCreditGrant } from '../../src/store/credit-grants.js'
import { postgresLookups } from '../../src/store/tenancy-lookups.js'
import { createParentAccount, createSubAccount } from '../../src/store/tenants.js'
import { freshDatabase } from '../helpers/db.js'
import { buffersRead } from '../helpers/request-log-rows.js'

const database = await freshDatabase(t)
const sql = database.sql
let statements = 0
let last: { statement: string; parameters: unknown[] } | null = null
const watched = postgres(database.url, {
  max: 2,
  onnotice: () => {},
  fetch_types: false,
  debug: (_connection, statement, parameters) => {
    statements++
    last = { statement, parameters }
  },
}) as unknown as Sql
t.teardown(() => watched.end())
const lookups = postgresLookups(watched)

async function counted<T>(lookup: () => Promise<T>): Promise<{ found: T; statements: number }> {
  const before = statements
  const found = await lookup()
  return { found, statements: statements - before }
}

const parent = await createParentAccount(sql, { name: 'p', externalId: null })
const grant = (subAccountId: string, meter: string, units: number, expiresAt: Date | null = null) =>
  sql.begin((tx) =>
    insertCreditGrant(tx, {
      id: randomUUID(),
      subAccountId,
      accountId: parent.id,
      meter,
      units,
      priority: 100,
      expiresAt,
      metadata: {},
    }),
  )

t.test('a sub-account without credits: one statement, no grants', async (t) => {
  const sub = await createSubAccount(sql, parent.id, {
    name: 'plain',
    externalId: null,
    metadata: {},
    limits: { rate: { requests: 5, per_seconds: 1 }, monthly_quota: null },
  })
  const bySub = await counted(() => lookups.subAccount(parent.id, sub.id))
  t.equal(bySub.statements, 1, 'subAccount: one statement')
  t.same(bySub.found?.credits, {}, 'no grants')
  t.equal(bySub.found?.planId, null)
  const byId = await counted(() => lookups.tenant(sub.id))
  t.equal(byId.statements, 1, 'tenant: one statement')
  t.same(byId.found?.credits, {})
  const missing = await counted(() => lookups.subAccount(parent.id, randomUUID()))
  t.equal(missing.statements, 1, 'an unknown sub-account: one statement')
  t.equal(missing.found, null)
})

t.test('a parent account: one statement, no credits read', async (t) => {
  const found = await counted(() => lookups.tenant(parent.id))
  t.equal(found.statements, 1)
  t.equal(found.found?.id, parent.id)
  t.notOk(found.found !== null && 'credits' in found.found, 'a parent has no credits')
})

t.test("a sub-account's own credit: its grants, read in the same statement", async (t) => {
  const sub = await createSubAccount(sql, parent.id, {
    name: 'own',
    externalId: null,
    metadata: {},
    limits: { rate: null, monthly_quota: null, credits: { tokens: { required: true, low_threshold_percent: 10 } } },
  })
  const expiresAt = new Date(Date.now() + 3_600_000)
  await grant(sub.id, 'tokens', 100, expiresAt)
  const voided = await grant(sub.id, 'tokens', 40)
  await sql`update credit_grants set units_left = 15, voided_at = now() where id = ${voided.id}`
  await grant(sub.id, 'images', 7)
  const found = await counted(() => lookups.subAccount(parent.id, sub.id))
  t.equal(found.statements, 1, 'one statement')
  t.same(
    found.found?.credits,
    {
      tokens: { settled: 25, live: [{ units: 100, left: 100, expiresAt: expiresAt.getTime() }] },
      images: { settled: 0, live: [{ units: 7, left: 7, expiresAt: null }] },
    },
    "every meter's grants, its own credit's and another's (a plan's credit may name it): the voided grant's burned units settled, the live one with its expiry",
  )
  const none = await createSubAccount(sql, parent.id, {
    name: 'own-no-grants',
    externalId: null,
    metadata: {},
    limits: { rate: null, monthly_quota: null, credits: { tokens: { required: true, low_threshold_percent: 10 } } },
  })
  const empty = await counted(() => lookups.tenant(none.id))
  t.equal(empty.statements, 1)
  t.same(
    empty.found?.credits,
    { tokens: { settled: 0, live: [] } },
    'a meter it names without grants: an empty balance',
  )
})

t.test('a sub-account without credits of its own: every meter it has grants of (its plan may name them)', async (t) => {
  const sub = await createSubAccount(sql, parent.id, { name: 'planned', externalId: null, metadata: {} })
  await grant(sub.id, 'tokens', 10)
  await grant(sub.id, 'images', 3)
  await grant(sub.id, 'images', 2)
  const found = await counted(() => lookups.subAccount(parent.id, sub.id))
  t.equal(found.statements, 1)
  const credits = found.found?.credits ?? {}
  t.same(Object.keys(credits).sort(), ['images', 'tokens'])
  t.same(credits.tokens, { settled: 0, live: [{ units: 10, left: 10, expiresAt: null }] })
  t.equal(credits.images?.live.length, 2)
})

t.test("the statement reads the sub-account's grants by index, not every grant", async (t) => {
  // 20,000 grants of 200 other sub-accounts, a third of them voided (they count in a balance too).
  const others = await Promise.all(
    Array.from({ length: 200 }, (_, i) =>
      createSubAccount(sql, parent.id, { name: `o${i}`, externalId: null, metadata: {} }),
    ),
  )
  await sql`
    insert into credit_grants (id, sub_account_id, account_id, meter, units, units_left, voided_at)
    select gen_random_uuid(), (${sql.json(others.map((o) => o.id))}::jsonb ->> (i % 200))::uuid, ${parent.id},
           'tokens', 100, 40, case when i % 3 = 0 then now() end
    from generate_series(1, 20000) i`
  await sql`analyze credit_grants`
  const sub = await createSubAccount(sql, parent.id, { name: 'indexed', externalId: null, metadata: {} })
  await grant(sub.id, 'tokens', 10)
  for (const [what, lookup] of [
    ['subAccount', () => lookups.subAccount(parent.id, sub.id)],
    ['tenant', () => lookups.tenant(sub.id)],
  ] as const) {
    last = null
    t.equal((await lookup())?.credits?.tokens?.live.length, 1, `${what}: its grant`)
    const pages = await buffersRead(sql as never, last!.statement, last!.parameters)
    // Without the index it read about 400 (every grant); with it, 5.
    t.ok(pages < 100, `${what}: read ${pages} pages, fewer than 100`)
  }
})

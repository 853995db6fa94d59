// Migrations (docs/configuration.md): applied once each under an advisory lock, so that replicas
// can start together; a failing migration leaves nothing behind; `cli migrate` for a Helm hook.
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import t from 'tap'
import type { Sql } from '../../src/store/db.js'
import { DEFAULT_MIGRATIONS_DIR, migrate, readMigrations } from '../../src/store/migrate.js'
import { type CliResult, runCliHere } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { freshDatabase } from '../helpers/db.js'

const VERSIONS = readMigrations().map((m) => m.version)

/** `cli migrate` in process (test/helpers/cli.ts), in this shell without its REDIS_URL and DATABASE_URL. */
function runCli(args: string[], env: Record<string, string | undefined>): Promise<CliResult> {
  const shell: Record<string, string | undefined> = { ...process.env }
  delete shell.REDIS_URL
  delete shell.DATABASE_URL
  return runCliHere(args, { ...shell, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY, ...env })
}

/** The lines of an output that must consist of whole lines: each ends in a newline. */
function lines(text: string): string[] {
  const parts = text.split('\n')
  if (parts.pop() !== '') throw new Error(`output does not end in a newline: ${JSON.stringify(text)}`)
  return parts
}

async function tableExists(sql: Sql, name: string): Promise<boolean> {
  const [row] = await sql<{ oid: string | null }[]>`select to_regclass(${`public.${name}`})::text as oid`
  return row!.oid !== null
}

async function appliedVersions(sql: Sql): Promise<number[]> {
  if (!(await tableExists(sql, 'schema_migrations'))) return []
  const rows = await sql<{ version: number }[]>`select version from schema_migrations order by version`
  return rows.map((r) => r.version)
}

t.test('concurrent migrations on a fresh database: each version applied exactly once', async (t) => {
  const db = await freshDatabase(t, { migrated: false })
  t.same(await appliedVersions(db.sql), [], 'the database starts unmigrated')

  // Separate clients, each with one connection, so that the calls really race.
  const clients = Array.from({ length: 8 }, () => postgres(db.url, { max: 1, onnotice: () => {} }))
  t.teardown(() => Promise.all(clients.map((c) => c.end({ timeout: 5 }))))
  await Promise.all(clients.map((c) => c`select 1`)) // all connected before the race starts

  const results = await Promise.all(clients.map((c) => migrate(c)))
  t.equal(results.length, 8, 'all eight calls succeed')
  for (const version of VERSIONS) {
    const reporters = results.filter((applied) => applied.includes(version))
    t.equal(reporters.length, 1, `exactly one call reports applying version ${version}`)
  }
  t.equal(results.flat().length, VERSIONS.length, 'no call reports anything else')

  const rows = await db.sql<{ version: number; n: number }[]>`
    select version, count(*)::int as n from schema_migrations group by version order by version`
  t.same(
    rows.map((r) => r.version),
    VERSIONS,
    'schema_migrations holds every version',
  )
  t.ok(
    rows.every((r) => r.n === 1),
    'each version once',
  )
  t.ok(await tableExists(db.sql, 'tenants'), 'tenants exists')
  t.ok(await tableExists(db.sql, 'api_keys'), 'api_keys exists')

  t.same(await migrate(db.sql), [], 'a second migrate applies nothing')
  t.same(await appliedVersions(db.sql), VERSIONS, 'and changes nothing')
})

t.test('a failing migration rolls back entirely', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tgw-migrations-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  cpSync(DEFAULT_MIGRATIONS_DIR, dir, { recursive: true })
  writeFileSync(
    join(dir, '999_broken.sql'),
    'create table should_not_exist (x int);\nselect * from this_table_does_not_exist;\n',
  )

  t.test('on a migrated database', async (t) => {
    const db = await freshDatabase(t)
    await t.rejects(migrate(db.sql, dir), /this_table_does_not_exist/)
    t.notOk(await tableExists(db.sql, 'should_not_exist'), 'the first statement of the broken migration is undone')
    t.same(await appliedVersions(db.sql), VERSIONS, 'version 999 is not recorded; earlier versions stay')
    t.ok(await tableExists(db.sql, 'tenants'), 'earlier migrations are untouched')
  })

  t.test('on a fresh database (all pending migrations share one transaction)', async (t) => {
    const db = await freshDatabase(t, { migrated: false })
    await t.rejects(migrate(db.sql, dir), /this_table_does_not_exist/)
    t.notOk(await tableExists(db.sql, 'should_not_exist'), 'no should_not_exist')
    t.same(await appliedVersions(db.sql), [], 'no version recorded, 999 included')
    t.notOk(await tableExists(db.sql, 'tenants'), 'nothing half-written')
    // The real migrations still apply afterwards.
    t.same(await migrate(db.sql), VERSIONS)
  })
})

t.test('cli migrate', async (t) => {
  t.test('applies pending migrations and prints one JSON line', async (t) => {
    const db = await freshDatabase(t, { migrated: false })
    const result = await runCli(['migrate'], { DATABASE_URL: db.url })
    t.equal(result.code, 0, `exit 0 (stderr: ${result.stderr})`)
    t.equal(result.stderr, '', 'nothing on stderr')
    const out = lines(result.stdout)
    t.equal(out.length, 1, 'exactly one line on stdout')
    t.same(JSON.parse(out[0]!), { applied: VERSIONS })
    t.same(await appliedVersions(db.sql), VERSIONS)

    const again = await runCli(['migrate'], { DATABASE_URL: db.url })
    t.equal(again.code, 0)
    t.same(
      lines(again.stdout).map((l) => JSON.parse(l)),
      [{ applied: [] }],
      'a second run applies nothing',
    )
  })

  t.test('an unreachable database: non-zero exit, one line on stderr, nothing on stdout', async (t) => {
    const result = await runCli(['migrate'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/x' })
    t.not(result.code, 0, 'non-zero exit')
    t.ok(result.code !== null, 'exited (not killed)')
    t.equal(result.stdout, '', 'nothing on stdout')
    t.equal(lines(result.stderr).length, 1, `exactly one line on stderr: ${JSON.stringify(result.stderr)}`)
    t.not(lines(result.stderr)[0], '', 'a non-empty message')
  })
})

t.test('006 (limits) applies on a database that holds tenants and usage', async (t) => {
  // The database as the release before limits left it: migrations up to 005, then data.
  const dir = mkdtempSync(join(tmpdir(), 'tgw-migrations-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  for (const m of readMigrations().filter((m) => m.version <= 5))
    writeFileSync(join(dir, `${String(m.version).padStart(3, '0')}_${m.name}.sql`), m.sql)
  const db = await freshDatabase(t, { migrated: false })
  t.same(await migrate(db.sql, dir), [1, 2, 3, 4, 5])
  const [parent] = await db.sql<{ id: string }[]>`insert into tenants (name) values ('old') returning id`
  const [sub] = await db.sql<{ id: string }[]>`
    insert into tenants (parent_id, name, metadata) values (${parent!.id}, 'old sub', '{"a":"b"}') returning id`
  await db.sql`
    insert into usage_daily (tenant_id, day, status_class, requests)
    values (${sub!.id}, '2026-11-20', 2, 12), (${sub!.id}, '2026-11-20', 4, 3)`

  for (const m of readMigrations().filter((m) => m.version === 6))
    writeFileSync(join(dir, `${String(m.version).padStart(3, '0')}_${m.name}.sql`), m.sql)
  t.same(await migrate(db.sql, dir), [6], 'only 006 is pending, and it applies')
  const tenants = await db.sql<{ name: string; limits: unknown; metadata: unknown }[]>`
    select name, limits, metadata from tenants order by seq`
  t.same(
    tenants,
    [
      { name: 'old', limits: null, metadata: {} },
      { name: 'old sub', limits: null, metadata: { a: 'b' } },
    ],
    'tenants kept, with no limits',
  )
  const usage = await db.sql<{ status_class: number; requests: string; forwarded: string; r: string; q: string }[]>`
    select status_class, requests::text, forwarded::text, limited_rate::text as r, limited_quota::text as q
    from usage_daily order by status_class`
  t.same(
    usage,
    [
      { status_class: 2, requests: '12', forwarded: '0', r: '0', q: '0' },
      { status_class: 4, requests: '3', forwarded: '0', r: '0', q: '0' },
    ],
    'usage kept; what was forwarded before cannot be told, so it counts as none',
  )
  await t.rejects(
    db.sql`update usage_daily set forwarded = -1 where status_class = 2`,
    /usage_daily_counts_not_negative/,
    'the counts check applies to rows written from now on',
  )
  await t.rejects(
    db.sql`update tenants set limits = '[1]'::jsonb where id = ${parent!.id}`,
    /check constraint/,
    'limits are an object or null',
  )
})

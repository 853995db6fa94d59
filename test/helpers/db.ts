// A fresh Postgres database per test file, on the machine's real server, dropped afterwards.
// Migrated ones are copies of a template migrated once per set of migrations (CREATE DATABASE …
// TEMPLATE): a copy takes a fraction of the server's work of running every migration again.
// Under tap's runner a file's databases are dropped when the whole run ends (drop-run-databases.ts,
// the runner's `after`): every DROP DATABASE makes Postgres checkpoint, which writes out every other
// running file's changed pages, and in a run of hundreds of files that was half the server's CPU.
import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import postgres from 'postgres'
import type { Sql } from '../../src/store/db.js'
import { migrate, readMigrations } from '../../src/store/migrate.js'
import { stopTheRun, type TestLike } from './test-like.js'

/** The server tests use; override with TEST_DATABASE_URL (any database on it; we create our own). */
export const ADMIN_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'

/** The runner's process when tap's runner started this file (its children have TAP_CHILD_ID). */
const RUNNER_PID = process.env.TAP_CHILD_ID !== undefined ? process.ppid : undefined

/** What names this process's databases: by the run whose `after` drops them, if there is one. */
const RUN_PREFIX = RUNNER_PID === undefined ? 'tgw_test_' : runDatabasePrefix(RUNNER_PID)

/** The names of the databases of the tap run whose runner is `runnerPid`, up to their own part. */
export function runDatabasePrefix(runnerPid: number): string {
  return `tgw_test_r${runnerPid}_`
}

export interface TestDatabase {
  url: string
  sql: Sql
}

/** The URL without its password, for messages. */
function shown(url: string): string {
  const parsed = new URL(url)
  if (parsed.password !== '') parsed.password = '***'
  return parsed.toString()
}

let unreachable: Error | undefined

/** The error to fail with when the server does not answer: one message naming TEST_DATABASE_URL. */
function cannotReach(err: unknown): Error {
  const error = new Error(
    `the tests' Postgres at ${shown(ADMIN_URL)} cannot be reached (${(err as Error).message}): ` +
      'start it, or set TEST_DATABASE_URL to a server on which the tests may create databases',
  )
  return stopTheRun(error)
}

export async function freshDatabase(t: TestLike, options: { migrated?: boolean } = {}): Promise<TestDatabase> {
  // Once the server did not answer, every later test of the file fails at once, with the same words.
  if (unreachable !== undefined) throw unreachable
  const name = `${RUN_PREFIX}${randomBytes(6).toString('hex')}`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {}, connect_timeout: 10 })
  const migrated = options.migrated !== false
  try {
    if (migrated) await copyTemplate(admin, name)
    else await admin.unsafe(`create database ${name}`)
  } catch (err) {
    await admin.end({ timeout: 1 })
    const code = (err as { code?: string }).code
    // A connection that failed (refused, unknown host, timed out), not a statement Postgres refused.
    if (code === undefined || !/^[0-9A-Z]{5}$/.test(code) || code.startsWith('08') || code.startsWith('28')) {
      unreachable = cannotReach(err)
      throw unreachable
    }
    throw err
  }
  const url = databaseUrl(name)
  const sql = postgres(url, { max: 10, onnotice: () => {}, fetch_types: false })
  t.teardown(async () => {
    await sql.end({ timeout: 5 })
    if (RUNNER_PID === undefined) await admin.unsafe(`drop database if exists ${name} with (force)`)
    else {
      // Closed as a drop would close it (WITH (FORCE)), for the runner's `after` to drop.
      await admin.unsafe(`alter database ${name} allow_connections false`)
      await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name}`
    }
    await admin.end({ timeout: 5 })
  })
  // Each deployment draws its own paging cursors' secret (migration 005): so does each copy.
  if (migrated)
    await sql`
      update gateway_secrets set value = uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
      where name = 'cursor'`
  return { url, sql }
}

function databaseUrl(name: string): string {
  const url = new URL(ADMIN_URL)
  url.pathname = `/${name}`
  return url.toString()
}

/** Creates `name` as a copy of the migrated template (made anew if another checkout's run dropped it). */
async function copyTemplate(admin: postgres.Sql, name: string): Promise<void> {
  try {
    await admin.unsafe(`create database ${name} template ${await migratedTemplate(admin)}`)
  } catch (err) {
    if ((err as { code?: string }).code !== '3D000') throw err // invalid_catalog_name: no such template
    template = undefined
    await admin.unsafe(`create database ${name} template ${await migratedTemplate(admin)}`)
  }
}

/** The module that applies the migrations: part of what a template is made by. */
const MIGRATE_SOURCE = fileURLToPath(new URL('../../src/store/migrate.ts', import.meta.url))

/** Any number: the advisory lock under which one test process at a time makes the template. */
const TEMPLATE_LOCK_ID = 7_316_471_103

let template: Promise<string> | undefined

/**
 * The name of a database migrated with this checkout's migrations, made by the first test process
 * that needs it (named by the migrations' digest, so that a changed migration makes a new one, and
 * the older templates are dropped). Nobody connects to it once it is made: a database being copied
 * must have no connection.
 */
function migratedTemplate(admin: postgres.Sql): Promise<string> {
  template ??= (async () => {
    const digest = createHash('sha256')
    for (const migration of readMigrations()) digest.update(`${migration.version}\0${migration.sql}\0`)
    digest.update(readFileSync(MIGRATE_SOURCE)) // how they are applied (schema_migrations) too
    const name = `tgw_template_${digest.digest('hex').slice(0, 16)}`
    await admin.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${TEMPLATE_LOCK_ID})`
      const [found] = await tx`select 1 from pg_database where datname = ${name}`
      if (found !== undefined) return
      // CREATE and DROP DATABASE cannot run in a transaction: a connection of their own, while
      // this one holds the lock.
      const other = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
      try {
        for (const { datname } of await other<{ datname: string }[]>`
          select datname from pg_database where datname like ${'tgw\\_template\\_%'}`)
          await other.unsafe(`drop database if exists ${datname} with (force)`)
        const building = `${name}_building`
        await other.unsafe(`create database ${building}`)
        const sql = postgres(databaseUrl(building), { max: 1, onnotice: () => {}, fetch_types: false })
        try {
          await migrate(sql)
        } finally {
          await sql.end({ timeout: 5 })
        }
        // A closed client's backend may linger a moment, and a database in use cannot be renamed.
        for (let tries = 0; ; tries++) {
          const [row] = await other<{ n: number }[]>`
            select count(*)::int as n from pg_stat_activity where datname = ${building}`
          if (row?.n === 0) break
          if (tries === 100)
            await other`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${building}`
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
        await other.unsafe(`alter database ${building} rename to ${name}`)
      } finally {
        await other.end({ timeout: 5 })
      }
    })
    return name
  })()
  // A failure is not kept: the next test asks again (and names the server's error itself).
  template.catch(() => (template = undefined))
  return template
}

/**
 * A folder for the embedded database (PGlite), removed after every teardown registered later.
 * Not t.testdir: tap removes that before the test's teardowns run, so a store still open (the
 * app's last writes) wrote into a folder being deleted, and its close then hung.
 */
export function embeddedDataDir(t: TestLike): string {
  const dir = mkdtempSync(join(tmpdir(), 'tgw-embedded-'))
  // Teardowns run last registered first: this one after the test's own close.
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

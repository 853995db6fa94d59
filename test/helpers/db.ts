// A fresh Postgres database per test file, on the machine's real server, dropped afterwards.
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import type { Sql } from '../../src/store/db.js'
import { migrate } from '../../src/store/migrate.js'
import { stopTheRun, type TestLike } from './test-like.js'

/** The server tests use; override with TEST_DATABASE_URL (any database on it; we create our own). */
export const ADMIN_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'

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
  const name = `tgw_test_${randomBytes(6).toString('hex')}`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {}, connect_timeout: 10 })
  try {
    await admin.unsafe(`create database ${name}`)
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
  const url = new URL(ADMIN_URL)
  url.pathname = `/${name}`
  const sql = postgres(url.toString(), { max: 10, onnotice: () => {}, fetch_types: false })
  t.teardown(async () => {
    await sql.end({ timeout: 5 })
    await admin.unsafe(`drop database if exists ${name} with (force)`)
    await admin.end({ timeout: 5 })
  })
  if (options.migrated !== false) await migrate(sql)
  return { url: url.toString(), sql }
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

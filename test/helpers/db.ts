// A fresh Postgres database per test file, on the machine's real server, dropped afterwards.
import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import type { Sql } from '../../src/store/db.js'
import { migrate } from '../../src/store/migrate.js'

/** The server tests use; override with TEST_DATABASE_URL (any database on it; we create our own). */
export const ADMIN_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'

export interface TestDatabase {
  url: string
  sql: Sql
}

interface Teardown {
  teardown(fn: () => unknown): void
}

export async function freshDatabase(t: Teardown, options: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const name = `tgw_test_${randomBytes(6).toString('hex')}`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database ${name}`)
  const url = new URL(ADMIN_URL)
  url.pathname = `/${name}`
  const sql = postgres(url.toString(), { max: 10, onnotice: () => {} })
  t.teardown(async () => {
    await sql.end({ timeout: 5 })
    await admin.unsafe(`drop database if exists ${name} with (force)`)
    await admin.end({ timeout: 5 })
  })
  if (options.migrated !== false) await migrate(sql)
  return { url: url.toString(), sql }
}

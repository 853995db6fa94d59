// Numbered SQL migrations (migrations/NNN_name.sql), applied in order, each exactly once.
// All pending migrations run in one transaction that first takes a transaction-level advisory
// lock: replicas that start together queue on the lock, and the later ones find nothing to do.
// A failing migration rolls back entirely and its error propagates: the deploy must fail. They
// run without the pool's statement and lock timeouts (store/db.ts), which would fail a long one.
import { readdirSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { join } from 'node:path'
import { type Sql, withoutTimeouts } from './db.js'

export const DEFAULT_MIGRATIONS_DIR = fileURLToPath(new URL('./migrations/', import.meta.url))

// An arbitrary constant of this project, so that no other application's lock collides with it.
const MIGRATION_LOCK_ID = 7_316_471_102

export interface Migration {
  version: number
  name: string
  sql: string
}

export function readMigrations(dir: string = DEFAULT_MIGRATIONS_DIR): Migration[] {
  const migrations = readdirSync(dir)
    .filter((file) => file.endsWith('.sql'))
    .map((file) => {
      const match = /^(\d+)_([\w-]+)\.sql$/.exec(file)
      if (!match) throw new Error(`migration file name must look like 001_name.sql: ${file}`)
      return { version: Number(match[1]), name: match[2]!, sql: readFileSync(join(dir, file), 'utf8') }
    })
    .sort((a, b) => a.version - b.version)
  migrations.forEach((m, i) => {
    if (i > 0 && migrations[i - 1]!.version === m.version) throw new Error(`two migrations have version ${m.version}`)
  })
  return migrations
}

/** Applies pending migrations and returns the versions it applied. */
export async function migrate(sql: Sql, dir: string = DEFAULT_MIGRATIONS_DIR): Promise<number[]> {
  const migrations = readMigrations(dir)
  return sql.begin(async (tx) => {
    // No timeout of the pool's: a migration ends by its own outcome, however long a large table
    // takes, and a replica waits on the lock for as long as another migrates.
    await withoutTimeouts(tx)
    await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK_ID})`
    await tx`
      create table if not exists schema_migrations (
        version    integer primary key,
        name       text not null,
        applied_at timestamptz not null default now()
      )`
    const applied = new Set(
      (await tx<{ version: number }[]>`select version from schema_migrations`).map((r) => r.version),
    )
    const done: number[] = []
    for (const migration of migrations) {
      if (applied.has(migration.version)) continue
      await tx.unsafe(migration.sql)
      await tx`insert into schema_migrations (version, name) values (${migration.version}, ${migration.name})`
      done.push(migration.version)
    }
    return done
  })
}

// SQL of the deployment's shared secrets (migrations/005_cursor_secret.sql).
import type { Sql } from './db.js'

/** The secret paging cursors are signed with; the migration makes it, so it is always there. */
export async function cursorSecret(sql: Sql): Promise<Buffer> {
  const rows = await sql<{ value: Uint8Array }[]>`select value from gateway_secrets where name = 'cursor'`
  const value = rows[0]?.value
  if (value === undefined) throw new Error('gateway_secrets has no cursor secret: run the migrations')
  return Buffer.from(value)
}

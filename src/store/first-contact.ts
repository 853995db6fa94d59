// The first contact with a real Postgres (docs/operations.md): a start waits for its first answer,
// and fails with a message that says what is wrong; /readyz asks whether any was had.
import { QueryTimeoutError, type Sql, withDeadline } from './db.js'
import { COMMON_OPTIONS } from './postgres-options.js'

/**
 * True once one of the pool's connections has completed its startup with Postgres since the
 * process started: postgres.js keeps the parameters the server reports then (server_version
 * among them) for the pool's lifetime, whatever happens to the connection afterwards.
 */
export function hasReachedPostgres(sql: Sql): boolean {
  return sql.parameters.server_version !== undefined
}

/** How long a start waits for its first answer from a real Postgres (docs/operations.md). */
export const FIRST_CONTACT_TIMEOUT_MS = 10_000

/** Where a connection string points, for messages: host:port/database, never the password. */
export function describeDatabaseUrl(databaseUrl: string): string {
  const url = new URL(databaseUrl)
  return `${url.hostname || 'localhost'}:${url.port || '5432'}${url.pathname.length > 1 ? url.pathname : ''}`
}

/**
 * Waits for a real Postgres's first answer, and fails with a message that names Postgres,
 * DATABASE_URL and where it was tried. postgres.js retries a host that does not answer without
 * end (each attempt ends at connect_timeout, and the next begins), so a start would otherwise hang
 * in silence. On failure the pool is ended at once: nothing was sent that is worth waiting for.
 */
export async function reachPostgres(
  sql: Sql,
  databaseUrl: string,
  timeoutMs = FIRST_CONTACT_TIMEOUT_MS,
): Promise<void> {
  try {
    await withDeadline(sql`select 1`, timeoutMs)
  } catch (err) {
    await sql.end({ timeout: 0 })
    const code = (err as { code?: unknown }).code
    const where = describeDatabaseUrl(databaseUrl)
    // Postgres answered: the address is right, and the message says what else is wrong.
    if (code === '3D000') {
      // The one postgres.js asked for (with no path in the URL: the user's name, or PGDATABASE).
      const name = String(sql.options.database)
      throw new Error(
        `Postgres at ${where} answers but has no database "${name}" (DATABASE_URL): create it (createdb ${name}) or name one that exists`,
      )
    }
    if (code === '28P01' || code === '28000')
      throw new Error(
        `Postgres at ${where} answers but refuses the user or password of DATABASE_URL: ${(err as Error).message}`,
      )
    const why =
      err instanceof QueryTimeoutError
        ? `no answer within ${timeoutMs / 1000} s`
        : code === 'CONNECT_TIMEOUT'
          ? `no answer within ${COMMON_OPTIONS.connect_timeout} s (the connection's timeout)`
          : (err as Error).message
    throw new Error(`cannot reach Postgres at ${where} (DATABASE_URL): ${why}`)
  }
}

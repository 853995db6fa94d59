// Reading the events table directly, and checking that no event holds a secret (docs/events.md).
import type { Test } from 'tap'
import type { Sql } from '../../src/store/db.js'
import type { JsonBody } from './json.js'

/** A parent's events as the API shows them, oldest first. */
export async function eventsOf(sql: Sql, accountId: string): Promise<JsonBody[]> {
  const rows = await sql`
    select id, type, created_at, account_id, actor, target, request_id, source_ip, data
    from events where account_id = ${accountId} order by seq`
  return rows.map((row) => ({ ...row, created_at: (row.created_at as Date).toISOString() }))
}

/** Events of a parent past `seen` (a count taken before): what one change wrote. */
export async function newEvents(sql: Sql, accountId: string, seen: number): Promise<JsonBody[]> {
  return (await eventsOf(sql, accountId)).slice(seen)
}

/**
 * No key or client secret (or anything shaped like one) and no digest of any key or secret in the
 * store, in hex or base64, anywhere in the events table.
 */
export async function checkNoSecrets(t: Test, sql: Sql, extra: string[] = []): Promise<void> {
  const [{ text }] = (await sql`select coalesce(string_agg(to_jsonb(e)::text, E'\n'), '') as text from events e`) as [
    { text: string },
  ]
  t.notMatch(text, /tgws?_[0-9A-Za-z]{49}/, 'no key or client secret shape')
  t.notMatch(text, /tgws_/, 'no client secret prefix')
  const digests = await sql<{ key_digest: Buffer; secret_digest: Buffer | null }[]>`
    select key_digest, secret_digest from api_keys`
  const forbidden = digests.flatMap(({ key_digest, secret_digest }) =>
    [key_digest, secret_digest]
      .filter((d): d is Buffer => d !== null)
      .flatMap((d) => [d.toString('hex'), d.toString('base64'), d.toString('base64url')]),
  )
  const found = [...forbidden, ...extra].filter((value) => text.includes(value))
  t.same(found, [], `no digest or secret among ${forbidden.length + extra.length} values`)
}

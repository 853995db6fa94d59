// Who the actors of a page of audit-log events are (docs/api.md, Audit log, `expand=actor`): a
// key's name and prefix, a portal session's sub-account. SQL only. Read when asked, not stored in
// the event: an event keeps ids only, so that a key renamed later is shown by its name of now.
import type { Sql, Tx } from './db.js'

type Db = Sql | Tx

// The ids cross as JSON, as every list does here: the pool does not fetch array types (postgres-options.ts). The
// callers pass UUIDs only (the events' own actor ids).

export interface KeyActor {
  id: string
  name: string
  prefix: string
  /** Null for a key of the parent itself. */
  sub_account_id: string | null
}

/** The parent's own keys and its sub-accounts' keys among `ids`; another account's are left out. */
export function keyActors(db: Db, accountId: string, ids: readonly string[]): Promise<KeyActor[]> {
  if (ids.length === 0) return Promise.resolve([])
  return db<KeyActor[]>`
    select k.id, k.name, k.prefix, case when t.parent_id is null then null else t.id end as sub_account_id
    from api_keys k join tenants t on t.id = k.tenant_id
    where k.id in (select value::uuid from jsonb_array_elements_text(${db.json(ids as string[])}))
      and (t.id = ${accountId} or t.parent_id = ${accountId})`
}

/** The sub-account of each of the parent's portal sessions among `ids`. */
export function portalSessionActors(
  db: Db,
  accountId: string,
  ids: readonly string[],
): Promise<{ id: string; sub_account_id: string }[]> {
  if (ids.length === 0) return Promise.resolve([])
  return db<{ id: string; sub_account_id: string }[]>`
    select p.id, p.sub_account_id from portal_sessions p join tenants t on t.id = p.sub_account_id
    where p.id in (select value::uuid from jsonb_array_elements_text(${db.json(ids as string[])})) and t.parent_id = ${accountId}`
}

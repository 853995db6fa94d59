// SQL of key imports (docs/key-imports.md): the sub-accounts a batch of lines names, the keys that
// exist already with their digests, and the batch's keys written with their api_key.created events
// (and webhook deliveries) in one statement. A digest taken meanwhile is skipped, never doubled:
// `key_digest` is unique, so importing the same file twice writes each key once.
import type { Sql, Tx } from './db.js'
import { KEY_COLUMNS, type KeyRow } from './api-keys.js'
import { type EventRow, queuedDeliveries } from './events.js'
import { planInForceSql } from './plans.js'
import { Statement } from './statement.js'
import type { KeyPolicy } from '../guardrails/key-policy.js'

type Db = Sql | Tx

/** A sub-account of the parent named by a batch's lines, with what its keys must meet. */
export interface ImportTenant {
  id: string
  external_id: string | null
  /**
   * Its key policy in force, as a mint checks it: its own, filled in member by member from its
   * plan's (its own plan, else its parent's default: docs/api.md, Plans).
   */
  key_policy_in_force: KeyPolicy | null
}

/** The parent's sub-accounts among these ids and external ids, in one query. */
export function importTenants(
  db: Db,
  parentId: string,
  ids: readonly string[],
  externalIds: readonly string[],
): Promise<ImportTenant[]> {
  return db<ImportTenant[]>`
    select t.id, t.external_id,
      plan_effective_key_policy(t.key_policy, ${db.unsafe(planInForceSql('t', 'key_policy'))}) as key_policy_in_force
    from tenants t
    where t.parent_id = ${parentId}
      and (t.id = any (array(select given::uuid from jsonb_array_elements_text(${db.json(ids as string[])}) as given))
        or t.external_id = any (array(select jsonb_array_elements_text(${db.json(externalIds as string[])}))))`
}

/** A key that has one of the digests already, and the account it is of (its tenant's parent, or itself). */
export interface ExistingKey {
  id: string
  key_digest: Buffer
  account_id: string
}

export function existingKeys(db: Db, keyDigests: readonly Buffer[]): Promise<ExistingKey[]> {
  const hexes = keyDigests.map((d) => d.toString('hex'))
  return db<ExistingKey[]>`
    select k.id, k.key_digest, coalesce(t.parent_id, t.id) as account_id
    from api_keys k join tenants t on t.id = k.tenant_id
    where k.key_digest = any (array(select decode(h, 'hex') from jsonb_array_elements_text(${db.json(hexes)}) as given (h)))`
}

/** A key to write, its digest as hex, and the id of its event. */
export interface ImportedKey {
  tenant_id: string
  name: string
  scopes: string[]
  prefix: string
  key_digest: string
  expires_at: string | null
  event_id: string
}

/** What each key's event takes: who imports (events/record.ts Origin), and the key's object in SQL. */
export interface ImportEvents {
  actor: EventRow['actor']
  requestId: string | null
  sourceIp: string | null
  /** The event's object of the row named `alias`, for the account whose placeholder is `account`. */
  object: (alias: string, account: string) => string
}

/**
 * Writes the keys (origin `imported`) and an api_key.created event for each one written, in one
 * statement. Returns the rows written; a key whose digest was taken meanwhile is left out.
 */
export function insertImportedKeys(
  db: Db,
  accountId: string,
  events: ImportEvents,
  keys: readonly ImportedKey[],
): Promise<(KeyRow & { key_digest: Buffer })[]> {
  const s = new Statement()
  const account = s.param(accountId)
  return s.run(
    db,
    `with given as (
      select * from jsonb_to_recordset(${s.json(
        db,
        keys.map((key, n) => ({ ...key, n })),
      )}) as g (
        tenant_id uuid, name text, scopes jsonb, prefix text, key_digest text, expires_at timestamptz, event_id text, n int)
    ), changed as (
      insert into api_keys (tenant_id, name, scopes, prefix, key_digest, expires_at, origin)
      select g.tenant_id, g.name, array(select jsonb_array_elements_text(g.scopes)), g.prefix,
             decode(g.key_digest, 'hex'), g.expires_at, 'imported'
      from given g order by g.n
      on conflict (key_digest) do nothing
      returning ${KEY_COLUMNS}, key_digest
    ), event as (
      insert into events (id, account_id, type, actor, target, request_id, source_ip, data)
      select g.event_id, ${account}, 'api_key.created', ${s.json(db, events.actor)},
             jsonb_build_object('type', 'api_key', 'id', changed.id),
             ${s.param(events.requestId)}, ${s.param(events.sourceIp)},
             jsonb_build_object('object', ${events.object('changed', account)}, 'previous', null)
      from changed join given g on decode(g.key_digest, 'hex') = changed.key_digest
      returning id, account_id
    ), ${queuedDeliveries(s, 'api_key.created')}
    select * from changed`,
  )
}

// SQL of leaked keys (docs/secret-scanning.md): which reported digests are keys at all, and the
// live ones marked leaked, with their account's leak_policy applied (revoked, or only marked) and
// an api_key.leaked event each (and its webhook deliveries), in one statement. A key is marked
// once: a report seen again finds it marked (or revoked) and changes nothing.
import { KEY_COLUMNS, type KeyRow } from './api-keys.js'
import type { Sql, Tx } from './db.js'
import { type EventRow, queuedDeliveries } from './events.js'
import { Statement } from './statement.js'

type Db = Sql | Tx

export type LeakPolicy = 'revoke' | 'alert'

/** The digests (hex) among these that name a key, live or not. */
export async function knownDigests(db: Db, keyDigests: readonly Buffer[]): Promise<Set<string>> {
  const hexes = keyDigests.map((d) => d.toString('hex'))
  const rows = await db<{ hex: string }[]>`
    select encode(key_digest, 'hex') as hex from api_keys
    where key_digest = any (array(select decode(h, 'hex') from jsonb_array_elements_text(${db.json(hexes)}) as given (h)))`
  return new Set(rows.map((r) => r.hex))
}

/** A reported leak of the key with this digest (hex): where, who reported it, its event's id. */
export interface ReportedLeak {
  key_digest: string
  url: string | null
  source: string
  event_id: string
}

/** A key marked leaked by this statement, and what was done. */
export interface MarkedLeak {
  id: string
  tenant_id: string
  account_id: string
  key_digest: Buffer
  action: LeakPolicy
}

/** Who reports, for the events. */
export interface LeakEvents {
  actor: EventRow['actor']
  requestId: string | null
  sourceIp: string | null
}

/**
 * Marks the live keys (active, not past `expires_at`, not marked before) among `leaks` leaked and
 * applies their account's policy. `accountId`: only keys of this account (its own and its
 * sub-accounts'), for a parent's own report; null: any account's (secret scanning).
 */
export function markLeaks(
  db: Db,
  leaks: readonly ReportedLeak[],
  events: LeakEvents,
  accountId: string | null,
): Promise<MarkedLeak[]> {
  const s = new Statement()
  return s.run(
    db,
    `with given as (
      select * from jsonb_to_recordset(${s.json(db, leaks)}) as g (key_digest text, url text, source text, event_id text)
    ), targets as (
      select k.id, g.url, g.source, g.event_id, a.id as account_id, a.leak_policy
      from given g
      join api_keys k on k.key_digest = decode(g.key_digest, 'hex')
      join tenants t on t.id = k.tenant_id
      join tenants a on a.id = coalesce(t.parent_id, t.id)
      where k.status = 'active' and (k.expires_at is null or k.expires_at > now()) and k.leaked_at is null
        ${accountId === null ? '' : `and a.id = ${s.param(accountId)}`}
      for update of k
    ), changed as (
      update api_keys k set
        leaked_at = now(), leaked_url = targets.url, leaked_source = targets.source,
        status = case when targets.leak_policy = 'revoke' then 'revoked' else k.status end,
        revoked_at = case when targets.leak_policy = 'revoke' then coalesce(k.revoked_at, now()) else k.revoked_at end
      from targets where k.id = targets.id
      returning k.id, k.tenant_id, targets.account_id, k.key_digest, targets.leak_policy as action,
                targets.url, targets.source, targets.event_id
    ), event as (
      insert into events (id, account_id, type, actor, target, request_id, source_ip, data)
      select c.event_id, c.account_id, 'api_key.leaked', ${s.json(db, events.actor)},
             jsonb_build_object('type', 'api_key', 'id', c.id),
             ${s.param(events.requestId)}, ${s.param(events.sourceIp)},
             jsonb_build_object('object', jsonb_build_object(
               'key_id', c.id,
               'sub_account_id', case when c.tenant_id = c.account_id then null else c.tenant_id end,
               'url', c.url, 'source', c.source, 'action', c.action), 'previous', null)
      from changed c
      returning id, account_id
    ), ${queuedDeliveries(s, 'api_key.leaked')}
    select id, tenant_id, account_id, key_digest, action from changed`,
  )
}

/** The key of this digest if it is the account's (its own, or a sub-account's); null otherwise. */
export async function accountKeyByDigest(db: Db, accountId: string, keyDigest: Buffer): Promise<KeyRow | null> {
  const [row] = await db<KeyRow[]>`
    select ${db.unsafe(KEY_COLUMNS)} from api_keys
    where key_digest = ${keyDigest}
      and tenant_id in (select id from tenants where id = ${accountId} or parent_id = ${accountId})`
  return row ?? null
}

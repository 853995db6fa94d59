// API keys of parent accounts and sub-accounts. Only digests are stored (docs/api.md).
import type { Sql, Tx } from './db.js'
import { Statement } from './statement.js'
import type { KeyStatus } from '../shared/tenancy-records.js'

type Db = Sql | Tx

export type KeyOrigin = 'minted' | 'imported'

/** What a response may show of a key: never a digest. */
export interface KeyRow {
  id: string
  tenant_id: string
  name: string
  scopes: string[]
  prefix: string
  /** `imported`: brought over from elsewhere, in any format (docs/key-imports.md). */
  origin: KeyOrigin
  status: KeyStatus
  created_at: Date
  revoked_at: Date | null
  last_used_at: Date | null
  expires_at: Date | null
  rolled_from: string | null
  /** The addresses it may be used from; null: any (docs/api.md, IP allow-lists). */
  ip_allowlist: string[] | null
  /** When, where and by whom a leak of it was reported (docs/secret-scanning.md); null: never. */
  leaked: KeyLeak | null
}

/** A reported leak of a key, as a key object shows it. */
export interface KeyLeak {
  /** RFC 3339, UTC. */
  at: string
  url: string | null
  source: string
}

export type KeyPageRow = KeyRow & { seq: string }

/** What authentication needs of a key, found by the digest of its value. */
export interface KeyCredential {
  id: string
  tenant_id: string
  scopes: string[]
  status: KeyStatus
  expires_at: Date | null
  ip_allowlist: string[] | null
}

// Arrays come back as JSON: postgres.js parses no arrays (fetch_types is off, see postgres-options.ts).
/** A key's columns as KeyRow holds them (scopes as JSON, which crosses without array types). */
/** When a leak was reported, as Date#toISOString writes it (the key object's other times are so). */
const LEAKED_AT = `to_char(leaked_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`

export const KEY_COLUMNS =
  'id, tenant_id, name, to_jsonb(scopes) as scopes, prefix, origin, status, created_at, revoked_at, last_used_at, expires_at, rolled_from, to_jsonb(ip_allowlist) as ip_allowlist, ' +
  `case when leaked_at is null then null else jsonb_build_object('at', ${LEAKED_AT}, 'url', leaked_url, 'source', leaked_source) end as leaked`

/** What authentication reads of a key. */
const CREDENTIAL_COLUMNS =
  'id, tenant_id, to_jsonb(scopes) as scopes, status, expires_at, to_jsonb(ip_allowlist) as ip_allowlist'

export interface NewKey {
  tenantId: string
  name: string
  scopes: string[]
  prefix: string
  keyDigest: Buffer
  secretDigest: Buffer | null
  /** Null: never expires. */
  expiresAt?: Date | null
  /** The key this one replaces (a roll). */
  rolledFrom?: string | null
  /** Null or absent: any address. */
  ipAllowlist?: readonly string[] | null
}

/** The insert of a key returning its row, a statement or a CTE, its values parameters of `s`. */
export function insertKeySql(db: Db, s: Statement, key: NewKey): string {
  const allowlist =
    key.ipAllowlist == null ? 'null' : `array(select jsonb_array_elements_text(${s.json(db, key.ipAllowlist)}))`
  return `insert into api_keys (tenant_id, name, scopes, prefix, key_digest, secret_digest, expires_at, rolled_from, ip_allowlist)
    values (${s.param(key.tenantId)}, ${s.param(key.name)},
            array(select scope from jsonb_array_elements_text(${s.json(db, key.scopes)}) with ordinality as given (scope, n) order by n),
            ${s.param(key.prefix)}, ${s.param(key.keyDigest)}, ${s.param(key.secretDigest)}, ${s.param(key.expiresAt ?? null)},
            ${s.param(key.rolledFrom ?? null)}, ${allowlist})
    returning ${KEY_COLUMNS}`
}

export async function insertKey(db: Db, key: NewKey): Promise<KeyRow> {
  const s = new Statement()
  const [row] = await s.run<KeyRow[]>(db, insertKeySql(db, s, key))
  return row!
}

/**
 * The keys of several digests in one query (store/key-lookup-batcher.ts). The digests cross as a
 * JSON array of hex strings (postgres.js serialises no arrays here, see postgres-options.ts), so that the
 * statement's text is the same for any number of them.
 */
export async function findKeysByDigests(
  db: Db,
  keyDigests: readonly Buffer[],
): Promise<(KeyCredential & { key_digest: Buffer })[]> {
  const hexes = keyDigests.map((d) => d.toString('hex'))
  return db<(KeyCredential & { key_digest: Buffer })[]>`
    select ${db.unsafe(CREDENTIAL_COLUMNS)}, key_digest from api_keys
    where key_digest = any (array(select decode(h, 'hex') from jsonb_array_elements_text(${db.json(hexes)}) as given (h)))`
}

/** A key by its id (an access token names its key so), revoked or not. */
export async function findKeyById(db: Db, id: string): Promise<KeyCredential | null> {
  const [row] = await db<KeyCredential[]>`
    select ${db.unsafe(CREDENTIAL_COLUMNS)} from api_keys where id = ${id}`
  return row ?? null
}

export function listKeys(
  db: Db,
  tenantId: string,
  page: { limit: number; afterSeq: string | null },
): Promise<KeyPageRow[]> {
  return db<KeyPageRow[]>`
    select ${db.unsafe(KEY_COLUMNS)}, seq::text as seq from api_keys
    where tenant_id = ${tenantId}
      ${page.afterSeq === null ? db`` : db`and seq > ${page.afterSeq}`}
    order by api_keys.seq
    limit ${page.limit}`
}

/** One key of the tenant, revoked or not. */
export async function getKey(db: Db, tenantId: string, keyId: string): Promise<KeyRow | null> {
  const [row] = await db<KeyRow[]>`
    select ${db.unsafe(KEY_COLUMNS)} from api_keys where id = ${keyId} and tenant_id = ${tenantId}`
  return row ?? null
}

/** A key's row with the digest that names its cache entries (never shown). */
export type RevokedKeyRow = KeyRow & { key_digest: Buffer }

/**
 * A key of the tenant, locked until the transaction ends (a roll): a second roll of the same key
 * waits, then sees what the first made of it.
 */
export async function lockKey(tx: Tx, tenantId: string, keyId: string): Promise<RevokedKeyRow | null> {
  const [row] = await tx<RevokedKeyRow[]>`
    select ${tx.unsafe(KEY_COLUMNS)}, key_digest from api_keys
    where id = ${keyId} and tenant_id = ${tenantId}
    for update`
  return row ?? null
}

/**
 * Brings a key's expiry forward to `expiresAt` (never later than it was), and with `revoke`
 * revokes it too (a roll with no overlap).
 */
export async function shortenKey(tx: Tx, keyId: string, expiresAt: Date, revoke: boolean): Promise<RevokedKeyRow> {
  const [row] = await tx<RevokedKeyRow[]>`
    update api_keys set
      expires_at = least(expires_at, ${expiresAt}::timestamptz),
      ${revoke ? tx`status = 'revoked', revoked_at = coalesce(revoked_at, ${expiresAt}::timestamptz)` : tx`status = status`}
    where id = ${keyId}
    returning ${tx.unsafe(KEY_COLUMNS)}, key_digest`
  return row!
}

/** Revokes a key of the tenant; repeating it keeps the first revocation time. */
export async function revokeKey(db: Db, tenantId: string, keyId: string): Promise<RevokedKeyRow | null> {
  const [row] = await db<RevokedKeyRow[]>`
    update api_keys set status = 'revoked', revoked_at = coalesce(revoked_at, now())
    where id = ${keyId} and tenant_id = ${tenantId}
    returning ${db.unsafe(KEY_COLUMNS)}, key_digest`
  return row ?? null
}

/** What the token endpoint checks of a client (docs/credentials.md): the key, its secret's digest and its tenant. */
export interface ClientCredential {
  id: string
  tenant_id: string
  scopes: string[]
  status: KeyStatus
  expires_at: Date | null
  /** Null for a key minted without a client secret (parent keys). */
  secret_digest: Buffer | null
  tenant_status: 'active' | 'deactivated'
  /** The key's own allow-list, and its sub-account's key policy's (null: any address). */
  ip_allowlist: string[] | null
  tenant_ip_allowlist: string[] | null
  /** The tenant's parent; null for a parent account's own key. */
  parent_id: string | null
}

/** A key by id with its secret's digest and its tenant, in one query; null when there is no such key. */
/**
 * The client credentials of several key ids in one query (the token endpoint's paced lookups,
 * oauth/client-lookups.ts); ids that name no key are simply absent.
 */
export async function findClientCredentials(db: Db, ids: readonly string[]): Promise<ClientCredential[]> {
  return db<ClientCredential[]>`
    select k.id, k.tenant_id, to_jsonb(k.scopes) as scopes, k.status, k.expires_at, k.secret_digest,
           to_jsonb(k.ip_allowlist) as ip_allowlist,
           -- Its own policy's allow-list, else its plan's (docs/api.md, Plans).
           coalesce(nullif(t.key_policy -> 'ip_allowlist', 'null'::jsonb),
             (select p.key_policy -> 'ip_allowlist' from plans p
               where p.id = coalesce(t.plan_id, (select d.default_plan_id from tenants d where d.id = t.parent_id))))
             as tenant_ip_allowlist,
           t.status as tenant_status, t.parent_id
    from api_keys k join tenants t on t.id = k.tenant_id
    where k.id = any (array(select given.id::uuid from jsonb_array_elements_text(${db.json(ids as string[])}) as given (id)))`
}

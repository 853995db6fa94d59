// Portal sessions and a parent's portal origins (docs/api.md, Portal sessions). SQL only; callers
// pass `sql` or a transaction. Tokens and session credentials arrive as SHA-256 digests.
import type { Sql, Tx } from './db.js'

type Db = Sql | Tx

export interface PortalSessionRow {
  id: string
  sub_account_id: string
  account_id: string
  permissions: string[]
  return_url: string | null
  created_at: Date
  expires_at: Date
  ended_at: Date | null
  ended_reason: 'deleted' | 'deactivated' | null
  /** When the one-time token was exchanged; null while the link is unused. */
  token_used_at: Date | null
}

// Arrays cross as JSON: the pool does not fetch array types (store/postgres-options.ts).
const COLUMNS =
  'id, sub_account_id, account_id, to_jsonb(permissions) as permissions, return_url, created_at, expires_at, ended_at, ended_reason, token_used_at'
/** The same, of `portal_sessions s` in a join. */
const S_COLUMNS =
  's.id, s.sub_account_id, s.account_id, to_jsonb(s.permissions) as permissions, s.return_url, s.created_at, s.expires_at, s.ended_at, s.ended_reason, s.token_used_at'

export interface NewPortalSession {
  id: string
  subAccountId: string
  accountId: string
  permissions: readonly string[]
  returnUrl: string | null
  tokenDigest: Buffer
  expiresInSeconds: number
}

export async function insertPortalSession(db: Db, input: NewPortalSession): Promise<PortalSessionRow> {
  const [row] = await db<PortalSessionRow[]>`
    insert into portal_sessions (id, sub_account_id, account_id, permissions, return_url, token_digest, expires_at)
    values (${input.id}, ${input.subAccountId}, ${input.accountId},
            array(select jsonb_array_elements_text(${db.json([...input.permissions])}::jsonb)),
            ${input.returnUrl}, ${input.tokenDigest}, now() + make_interval(secs => ${input.expiresInSeconds}))
    returning ${db.unsafe(COLUMNS)}`
  return row!
}

/** A sub-account's open sessions (not ended, not expired), newest first, at most `limit`. */
export function listOpenPortalSessions(db: Db, subAccountId: string, limit: number): Promise<PortalSessionRow[]> {
  return db<PortalSessionRow[]>`
    select ${db.unsafe(COLUMNS)} from portal_sessions
    where sub_account_id = ${subAccountId} and ended_at is null and expires_at > now()
    order by created_at desc, id limit ${limit}`
}

/** How many open sessions a sub-account has (the cap of POST). */
export async function countOpenPortalSessions(db: Db, subAccountId: string): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    select count(*)::int as n from portal_sessions
    where sub_account_id = ${subAccountId} and ended_at is null and expires_at > now()`
  return row!.n
}

/**
 * Ends a session of the sub-account (locked first, so that two DELETEs write one event): the row
 * and whether this call ended it; null when the sub-account has no session of this id.
 */
export async function endPortalSession(
  tx: Tx,
  subAccountId: string,
  id: string,
): Promise<{ row: PortalSessionRow; changed: boolean } | null> {
  const [before] = await tx<PortalSessionRow[]>`
    select ${tx.unsafe(COLUMNS)} from portal_sessions where id = ${id} and sub_account_id = ${subAccountId} for update`
  if (before === undefined) return null
  if (before.ended_at !== null) return { row: before, changed: false }
  const [row] = await tx<PortalSessionRow[]>`
    update portal_sessions set ended_at = now(), ended_reason = 'deleted' where id = ${id}
    returning ${tx.unsafe(COLUMNS)}`
  return { row: row!, changed: true }
}

/**
 * The exchange: takes the one-time token (its digest) if it is unused, the session open and
 * unexpired and its sub-account active, and stores the digest of the session's credential, in one
 * statement: of two exchanges of one token, the row lock lets one through and the other finds
 * `token_used_at` set. Null when the token cannot be taken (unknown, used, expired, ended).
 */
export async function exchangePortalToken(
  db: Db,
  tokenDigest: Buffer,
  secretDigest: Buffer,
): Promise<PortalSessionRow | null> {
  const [row] = await db<PortalSessionRow[]>`
    update portal_sessions s set token_used_at = now(), secret_digest = ${secretDigest}
    from tenants t
    where s.token_digest = ${tokenDigest} and s.token_used_at is null and s.ended_at is null
      and s.expires_at > now() and t.id = s.sub_account_id and t.status = 'active'
    returning ${db.unsafe(S_COLUMNS)}`
  return row ?? null
}

/** Digests as the hex text a batch's query decodes (the pool sends no bytea arrays: store/postgres-options.ts). */
const hexes = (digests: readonly Buffer[]) => digests.map((d) => d.toString('hex'))

/**
 * The open sessions (not ended, not expired, sub-account active) whose credential has one of
 * these digests, each with its digest: one query for a batch (portal/credential-lookups.ts).
 */
export function openSessionsBySecrets(
  db: Db,
  secretDigests: readonly Buffer[],
): Promise<(PortalSessionRow & { secret_digest: Buffer })[]> {
  return db<(PortalSessionRow & { secret_digest: Buffer })[]>`
    select ${db.unsafe(S_COLUMNS)}, s.secret_digest from portal_sessions s join tenants t on t.id = s.sub_account_id
    where s.secret_digest = any (array(select decode(h, 'hex') from jsonb_array_elements_text(${db.json(hexes(secretDigests))}) as given (h)))
      and s.ended_at is null and s.expires_at > now()
      and t.status = 'active'`
}

/** A link that can still be exchanged, and its parent's portal origins as stored (null: none). */
export interface UsableLink {
  token_digest: Buffer
  session_id: string
  account_id: string
  portal_origins: string[] | null
}

/**
 * The links among these token digests that can still be exchanged (unused, the session open and
 * unexpired, its sub-account active), each with its parent's portal origins: one query for a
 * batch. The exchange itself (exchangePortalToken) takes the token, checking all this again.
 */
export function usableLinksByTokens(db: Db, tokenDigests: readonly Buffer[]): Promise<UsableLink[]> {
  return db<UsableLink[]>`
    select s.token_digest, s.id as session_id, s.account_id, to_jsonb(p.portal_origins) as portal_origins
    from portal_sessions s join tenants t on t.id = s.sub_account_id join tenants p on p.id = s.account_id
    where s.token_digest = any (array(select decode(h, 'hex') from jsonb_array_elements_text(${db.json(hexes(tokenDigests))}) as given (h)))
      and s.token_used_at is null
      and s.ended_at is null and s.expires_at > now() and t.status = 'active'`
}

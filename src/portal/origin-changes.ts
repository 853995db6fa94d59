// The operator's change of a parent account's portal origins (`cli -- accounts portal-origins`):
// the https origins that may embed its sub-account portal (the `frame-ancestors` of the portal's
// page: portal/plugin.ts), with its `account.portal_origins_updated` event in the same transaction
// (docs/events.md). The row is locked between reading and writing; a change that changes nothing
// writes neither. The page reads the origins from Postgres when it is loaded: no cache to tell.
import { type Origin, recordEvent } from '../events/record.js'
import { sameJson } from '../events/same-json.js'
import type { Sql } from '../store/db.js'
import { setPortalOrigins } from '../store/portal-sessions.js'
import { getTenant, type TenantRow } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'

export const PORTAL_ORIGINS_MAX = 20

/**
 * An https origin as a browser serialises it (`https://a.example`, `https://a.example:8443`), or
 * null when `text` is not one: no path, query, fragment, user or wildcard, since it goes into a
 * Content-Security-Policy as it is.
 */
export function httpsOrigin(text: string): string | null {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return null
  }
  if (url.protocol !== 'https:' || url.username !== '' || url.password !== '') return null
  if (url.search !== '' || url.hash !== '' || (url.pathname !== '/' && url.pathname !== '')) return null
  if (text.includes('*') || !/^https:\/\/[^/]+\/?$/i.test(text)) return null
  return url.origin
}

/** The account as it stands after the change; null when `accountId` names no parent account. */
export function setPortalOriginsWithEvent(
  sql: Sql,
  accountId: string,
  origins: readonly string[] | null,
  origin: Origin,
): Promise<{ account: TenantRow; origins: string[] | null } | null> {
  return inTransaction(sql, async (tx) => {
    const [current] = await tx<{ parent_id: string | null; origins: string[] | null }[]>`
      select parent_id, to_jsonb(portal_origins) as origins from tenants where id = ${accountId} for update`
    if (current === undefined || current.parent_id !== null) return null
    const after = origins === null ? null : [...origins]
    if (sameJson(current.origins, after)) return { account: (await getTenant(tx, accountId))!, origins: after }
    await setPortalOrigins(tx, accountId, after)
    const account = (await getTenant(tx, accountId))!
    await recordEvent(tx, origin, {
      accountId,
      type: 'account.portal_origins_updated',
      target: { type: 'account', id: accountId },
      object: {
        id: account.id,
        name: account.name,
        external_id: account.external_id,
        created_at: account.created_at.toISOString(),
        portal_origins: after,
      },
      previous: { portal_origins: current.origins },
    })
    return { account, origins: after }
  })
}

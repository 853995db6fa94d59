// Revocation reaches open sockets (docs/api.md, WebSockets): the invalidation bus that clears the
// caches on every replica also names the keys and tenants whose sockets may have to close. Each
// socket they name is checked again through the caches (the entry was just evicted, so the check
// reads the store): a key revoked or expired closes it (1008 `credentials revoked`), a tenant it
// acts for or that owns its key deactivated too (1008 `tenant deactivated`), and so does an access
// token whose signing key a rotation with `--compromised` withdrew (`credentials revoked`). The
// key's own expiry and an access token's need no message: each socket has a timer (socket-pair.ts).
// A message that came while the socket was still opening, or never came, is the sweep's (sweep.ts).
import type { FastifyBaseLogger } from 'fastify'
import { type EvictionListener, recordOfEntry } from '../../cache/entry-names.js'
import { isExpired, type KeyRecord, type TenancyLookups, type TenantRecord } from '../../shared/tenancy-records.js'
import { cellOf } from '../upstreams/route-cells.js'
import type { OpenSockets } from './open-sockets.js'
import { ENDINGS, type SocketPair } from './socket-pair.js'

/** Where a socket's credentials are checked again. */
export interface CredentialSources {
  readonly lookups: TenancyLookups
  /** Whether tokens signed by `kid` are still taken: false once a rotation withdrew it. */
  signingKeyAccepted(kid: string): boolean
}

/** A key that no longer opens anything: gone, revoked or expired. */
export function keyEnded(key: KeyRecord | null): key is null {
  return key === null || key.status !== 'active' || isExpired(key)
}

export function tenantEnded(tenant: TenantRecord | null): boolean {
  return tenant === null || tenant.status !== 'active'
}

/** An access token's signing key withdrawn (`--compromised`): the socket's credential is void. */
export function tokenWithdrawn(pair: SocketPair, sources: CredentialSources): boolean {
  const kid = pair.credentials.tokenKid
  return kid !== null && !sources.signingKeyAccepted(kid)
}

/** Checks a socket's credentials again; closes it if they no longer hold. */
export async function recheck(pair: SocketPair, sources: CredentialSources): Promise<void> {
  const { keyId, keyTenantId, actingTenantId } = pair.credentials
  if (keyId === null) return
  if (tokenWithdrawn(pair, sources)) {
    pair.end(ENDINGS.revoked)
    return
  }
  const key = await sources.lookups.keyById(keyId)
  if (keyEnded(key)) {
    pair.end(ENDINGS.revoked)
    return
  }
  // A roll may have brought the expiry nearer.
  pair.scheduleExpiry(key.expiresAt ?? null)
  for (const tenantId of new Set([actingTenantId, keyTenantId])) {
    if (tenantId === null) continue
    if (tenantEnded(await sources.lookups.tenant(tenantId))) {
      pair.end(ENDINGS.deactivated)
      return
    }
  }
  const cell = pair.credentials.cell
  if (cell == null || actingTenantId === null) return
  // Placed elsewhere since it opened (its own placement, or its parent's default): 1012, so that
  // its client reconnects to its new cell (docs/api.md, Cells).
  const acting = await sources.lookups.tenant(actingTenantId)
  const parent =
    acting?.placement == null && cell.parentId !== null ? await sources.lookups.tenant(cell.parentId) : null
  if (acting !== null && cellOf(acting, parent, cell.defaultCell) !== cell.served) pair.end(ENDINGS.cellChanged)
}

/** Checks a socket again; the store unreachable leaves it open, as a known key keeps working. */
export function recheckOrWarn(
  pair: SocketPair,
  sources: CredentialSources,
  log: FastifyBaseLogger,
  when: string,
): Promise<void> {
  return recheck(pair, sources).catch((err: unknown) => {
    log.warn({ err, keyId: pair.keyId }, `could not check an open WebSocket ${when}`)
  })
}

/** The cache's eviction listener that checks the sockets its names concern. */
export function revocationListener(
  sockets: OpenSockets<SocketPair>,
  sources: CredentialSources,
  log: FastifyBaseLogger,
): EvictionListener {
  return (names) => {
    if (sockets.size === 0) return
    const concerned = new Set<SocketPair>()
    if (names === null) {
      // Messages may have been lost: every socket is checked.
      for (const pair of sockets.all()) concerned.add(pair)
    } else {
      for (const name of names) {
        const record = recordOfEntry(name)
        if (record === null) continue
        const found = record.kind === 'key' ? sockets.withKey(record.id) : sockets.withTenant(record.id)
        for (const pair of found) concerned.add(pair)
      }
    }
    for (const pair of concerned) void recheckOrWarn(pair, sources, log, 'after an invalidation')
  }
}

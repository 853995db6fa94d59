// Revocation reaches open sockets (docs/api.md, WebSockets): the invalidation bus that clears the
// caches on every replica also names the keys and tenants whose sockets may have to close. Each
// socket they name is checked again through the caches (the entry was just evicted, so the check
// reads the store): a key revoked or expired closes it (1008 `credentials revoked`), a tenant it
// acts for or that owns its key deactivated too (1008 `tenant deactivated`). The key's own expiry
// and an access token's need no message: each socket has a timer (socket-pair.ts).
import type { FastifyBaseLogger } from 'fastify'
import { type EvictionListener, recordOfEntry } from '../../cache/entry-names.js'
import { isExpired, type TenancyLookups } from '../../tenancy/lookups.js'
import type { OpenSockets } from './open-sockets.js'
import { ENDINGS, type SocketPair } from './socket-pair.js'

/** Checks a socket's credentials again; closes it if they no longer hold. */
export async function recheck(pair: SocketPair, lookups: TenancyLookups): Promise<void> {
  const { keyId, keyTenantId, actingTenantId } = pair.credentials
  if (keyId === null) return
  const key = await lookups.keyById(keyId)
  if (key === null || key.status !== 'active' || isExpired(key)) {
    pair.end(ENDINGS.revoked)
    return
  }
  // A roll may have brought the expiry nearer.
  pair.scheduleExpiry(key.expiresAt ?? null)
  for (const tenantId of new Set([actingTenantId, keyTenantId])) {
    if (tenantId === null) continue
    const tenant = await lookups.tenant(tenantId)
    if (tenant === null || tenant.status !== 'active') {
      pair.end(ENDINGS.deactivated)
      return
    }
  }
}

/** The cache's eviction listener that checks the sockets its names concern. */
export function revocationListener(
  sockets: OpenSockets<SocketPair>,
  lookups: TenancyLookups,
  log: FastifyBaseLogger,
): EvictionListener {
  const check = (pair: SocketPair) =>
    recheck(pair, lookups).catch((err: unknown) => {
      // The store is unreachable: a known key keeps working (docs/api.md, caches), its socket too.
      log.warn({ err, keyId: pair.keyId }, 'could not check an open WebSocket after an invalidation')
    })
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
    for (const pair of concerned) void check(pair)
  }
}

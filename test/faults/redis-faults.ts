// Shared by the Redis fault tests (redis-down, redis-blackhole).
import { mintKey } from '../../src/auth/mint.js'
import type { Sql } from '../../src/store/db.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { createParent, metricValue, type Parent, type TestGateway } from '../helpers/gateway.js'

/** The bound on the time any request waits on Redis. */
export const REDIS_WAIT_BOUND_MS = 100
/** A revoke reaches every replica within this long (docs/internals.md). */
export const BUS_BOUND_MS = 1_000

/** `n` parent accounts, each with its key: a request with one asks for its key and its tenant. */
export async function parents(sql: Sql, n: number): Promise<Parent[]> {
  const out: Parent[] = []
  for (let i = 0; i < n; i++) out.push(await createParent(sql, { name: `p${i}` }))
  return out
}

export interface SubWithKey {
  /** The parent's key, which may revoke the sub-account's. */
  parentKey: string
  subId: string
  keyId: string
  apiKey: string
}

/** A parent, a sub-account and its key, made in Postgres only (no invalidation message is sent). */
export async function subWithKey(sql: Sql): Promise<SubWithKey> {
  const parent = await createParent(sql, { name: 'bus' })
  const sub = await createSubAccount(sql, parent.id, { name: 'bus', externalId: null, metadata: {} })
  const key = await mintKey(sql, { tenantId: sub.id, name: 'bus', scopes: [], withClientSecret: false })
  return { parentKey: parent.apiKey, subId: sub.id, keyId: key.row.id, apiKey: key.apiKey }
}

/** The gateway's store lookups and Redis failures so far, from its metrics. */
export async function storeLookups(
  gw: TestGateway,
): Promise<{ postgres: number; redis: number; errors: number; redisMisses: number }> {
  return {
    postgres: await metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'postgres' }),
    redis: await metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'redis' }),
    errors: await metricValue(gw.app, 'tgw_redis_errors_total'),
    redisMisses: await metricValue(gw.app, 'tgw_cache_misses_total', { tier: 'redis' }),
  }
}

// The in-process cache's bounds (src/cache/tiered.ts): by entries, and by an estimate of their
// size, so that records with long scope lists (50 × 100 characters a key) cannot outgrow the heap.
import { pino } from 'pino'
import t from 'tap'
import { TenancyCache } from '../../src/cache/tiered.js'
import { createMetrics } from '../../src/ops/metrics.js'
import type { KeyRecord, TenancyLookups } from '../../src/shared/tenancy-records.js'

/** A source of key records with `scopeCount` scopes of `scopeLength` characters; counts its reads. */
function source(scopeCount: number, scopeLength: number): { lookups: TenancyLookups; reads: () => number } {
  let reads = 0
  const record = (digest: Buffer): KeyRecord => ({
    id: digest.toString('hex'),
    tenantId: '00000000-0000-4000-8000-000000000000',
    scopes: Array.from({ length: scopeCount }, (_, i) => `${String(i).padStart(3, '0')}:`.padEnd(scopeLength, 'x')),
    status: 'active',
  })
  return {
    lookups: {
      keyByDigest: async (digest) => {
        reads++
        return record(digest)
      },
      keyById: async () => null,
      tenant: async () => null,
      subAccount: async () => null,
      subAccountIdByExternalId: async () => null,
      hasActiveSubAccounts: async () => false,
      plan: async () => null,
    },
    reads: () => reads,
  }
}

/** In-process only (no Redis); by default a budget of about 100 kB, and room for 1,000 entries by count. */
async function rereadsAfter(
  keys: number,
  scopeCount: number,
  scopeLength: number,
  maxEntries = 1_000,
): Promise<number> {
  const from = source(scopeCount, scopeLength)
  const cache = new TenancyCache({
    source: from.lookups,
    keyPrefix: 'unit:',
    timings: { maxEntries, maxEstimatedBytes: 100_000 },
    log: pino({ level: 'silent' }),
    metrics: createMetrics().cache,
  })
  t.teardown(() => cache.close())
  const digests = Array.from({ length: keys }, (_, i) => Buffer.alloc(32, i))
  for (const digest of digests) await cache.lookups.keyByDigest(digest)
  const before = from.reads()
  for (const digest of digests) await cache.lookups.keyByDigest(digest)
  return from.reads() - before
}

t.test('small records: 50 keys fit, a second pass reads nothing again', async (t) => {
  t.equal(await rereadsAfter(50, 2, 12), 0)
})

t.test('records with 50 scopes of 100 characters: the size budget, not the count, evicts', async (t) => {
  // About 10 kB each by the estimate: some 9 fit in 100 kB, so a second pass over 50 reads them all again.
  t.equal(await rereadsAfter(50, 50, 100), 50)
})

t.test('small records past the count: the count evicts, the least recently used first', async (t) => {
  // 50 small records fit the size budget many times over; room for 20 by count, so a second pass
  // in the same order finds each one evicted by the records after it.
  t.equal(await rereadsAfter(50, 2, 12, 20), 50)
  t.equal(await rereadsAfter(20, 2, 12, 20), 0, 'as many as the count: all kept')
})

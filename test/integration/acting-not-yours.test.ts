// "Not yours" and "no such" look alike
// (docs/decisions/0030-not-yours-and-no-such-take-the-same-time-too.md): a parent naming another
// parent's sub-account, one that replica has just served, gets the answer a UUID that exists
// nowhere gets, by the same way through the caches (tgw_cache_* and tgw_store_lookups_total move
// alike), not just with the same words. Real sockets, Postgres and Redis.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { sleep } from '../helpers/poll.js'

// Found records stay in-process for a minute, so that no background refresh moves a counter
// while one request is measured.
const gw = await startGateway(t, { cacheTimings: { localTtlMs: 60_000 } })
const PATH = '/v1/sub-accounts'

/** What one request made each tier do. */
async function tiers(): Promise<Record<string, number>> {
  return {
    localHits: await metricValue(gw.app, 'tgw_cache_hits_total', { tier: 'local' }),
    localMisses: await metricValue(gw.app, 'tgw_cache_misses_total', { tier: 'local' }),
    redis: await metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'redis' }),
    postgres: await metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'postgres' }),
  }
}

/** One request as `apiKey` acting as `acting`: its answer (less its request id) and what it made the tiers do. */
async function probe(apiKey: string, acting: string) {
  const before = await tiers()
  const response = await callAs(gw.url, apiKey, { path: PATH, acting })
  const after = await tiers()
  const { request_id: _, ...body } = response.json() as Record<string, unknown>
  const moved = Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - before[k]!]))
  return { status: response.status, body, moved }
}

t.test("another parent's sub-account in use on this replica, and a UUID that exists nowhere", async (t) => {
  const a = await gw.createParent({ name: 'prober' })
  const b = await gw.createParent({ name: 'owner' })
  const created = await callAs(gw.url, b.apiKey, {
    method: 'POST',
    path: PATH,
    acting: 'self',
    json: { name: 'theirs' },
  })
  t.equal(created.status, 201, 'B creates a sub-account')
  const theirs = (created.json() as { id: string }).id
  const minted = await callAs(gw.url, b.apiKey, {
    method: 'POST',
    path: `${PATH}/${theirs}/api-keys`,
    acting: 'self',
    json: { name: 'its key', scopes: ['orders:read'] },
  })
  t.equal(minted.status, 201, 'and a key for it')
  // The creations' invalidations are sent again 1 s later: past that, what B does next stays cached.
  await sleep(1_200)
  // B uses its sub-account on this replica: by acting as it, and by its own key.
  const asIt = await callAs(gw.url, b.apiKey, { path: PATH, acting: theirs })
  t.not(asIt.status, 401, `B acts as its sub-account (${asIt.status}: the management API wants B as itself)`)
  const byItsKey = await callAs(gw.url, (minted.json() as { api_key: string }).api_key, { path: PATH })
  t.not(byItsKey.status, 401, `its key authenticates (${byItsKey.status})`)
  // A's own key and tenant are warm.
  t.equal((await callAs(gw.url, a.apiKey, { path: PATH, acting: 'self' })).status, 200, 'A is served as itself')

  const nowhere = randomUUID()
  const first = { notYours: await probe(a.apiKey, theirs), noSuch: await probe(a.apiKey, nowhere) }
  const again = { notYours: await probe(a.apiKey, theirs), noSuch: await probe(a.apiKey, nowhere) }

  for (const [when, pair] of Object.entries({ first, again })) {
    t.equal(pair.notYours.status, 403, `${when}: another parent's sub-account is 403`)
    t.equal(pair.notYours.body.code, 'acting_tenant_forbidden', `${when}: acting_tenant_forbidden`)
    t.same(pair.notYours.body, pair.noSuch.body, `${when}: the same answer as for a UUID that exists nowhere`)
    t.same(
      pair.notYours.moved,
      pair.noSuch.moved,
      `${when}: the same way through the caches (${JSON.stringify(pair.notYours.moved)} and ${JSON.stringify(pair.noSuch.moved)})`,
    )
  }
  t.equal(first.notYours.moved.postgres, 1, 'the first time, both were asked of Postgres')
  t.equal(again.notYours.moved.postgres, 0, 'the second time, both were "not found" in the in-process cache')
  t.equal(again.notYours.moved.localMisses, 0)
})

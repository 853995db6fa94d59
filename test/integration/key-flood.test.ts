// A flood of random well-formed keys (the checksum is public: forging one costs nothing) against
// one gateway over real sockets, on real Postgres and Redis (docs/internals.md, caches): the
// Postgres queries it causes stay under the key batcher's pace (store/key-lookup-batcher.ts)
// whatever the flood's rate, and a key minted during the flood, never seen before, is served.
import { Agent } from 'node:http'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { generateApiKey } from '../../src/auth/key-format.js'
import { DEFAULT_KEY_BATCH_PACING } from '../../src/store/key-lookup-batcher.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { FLOOD_LOOKUP_INTERVAL_MS } from '../helpers/store-deadlines.js'
import { callAs, getOverAgent } from '../helpers/http.js'
import { sleep } from '../helpers/poll.js'

const FLOOD_MS = 10_000
/** Real keys minted and tried during the flood, at least. */
const REAL_KEYS = 10
const CONNECTIONS = 32
const PATH = '/v1/sub-accounts'

// A slower pace than production's, that the flood outruns however loaded the machine is.
const gw = await startGateway(t, { storeDeadlines: { lookupIntervalMs: FLOOD_LOOKUP_INTERVAL_MS } })
const postgresQueries = () => metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'postgres' })
const keyDigests = () => metricValue(gw.app, 'tgw_postgres_key_digests_total')

t.test('random well-formed keys at full speed for 10 s: Postgres queries bounded by the pace', async (t) => {
  // The gateway's pool and first queries are warm before the count starts.
  const warm = await gw.createParent({ name: 'warm-up' })
  t.equal((await callAs(gw.url, warm.apiKey, { path: PATH })).status, 200, 'a real key is served before the flood')

  const queriesBefore = await postgresQueries()
  const digestsBefore = await keyDigests()
  const statuses = new Map<number, number>()
  const started = performance.now()
  const until = started + FLOOD_MS
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS })
  // The flood lasts FLOOD_MS, and longer while the real keys below are fewer than REAL_KEYS (a
  // loaded machine mints them slowly).
  let realDone = false
  const worker = async () => {
    while (performance.now() < until || (!realDone && performance.now() < until + FLOOD_MS)) {
      const { status } = await getOverAgent(gw.url, agent, PATH, { authorization: `Bearer ${generateApiKey().apiKey}` })
      statuses.set(status, (statuses.get(status) ?? 0) + 1)
    }
  }
  // Meanwhile, keys minted in Postgres (never seen by the gateway), each tried once on a connection of its own.
  const realStatuses: number[] = []
  const realKeys = async () => {
    try {
      await sleep(500)
      while (
        performance.now() < until - 500 ||
        (realStatuses.length < REAL_KEYS && performance.now() < until + FLOOD_MS)
      ) {
        const parent = await gw.createParent({ name: 'minted during the flood' })
        realStatuses.push((await callAs(gw.url, parent.apiKey, { path: PATH })).status)
        await sleep(400)
      }
    } finally {
      realDone = true // a real use that threw ends the flood too
    }
  }
  await Promise.all([...Array.from({ length: CONNECTIONS }, worker), realKeys()])
  const elapsedMs = performance.now() - started
  agent.destroy()
  const queries = (await postgresQueries()) - queriesBefore
  const digests = (await keyDigests()) - digestsBefore
  const flood = [...statuses.values()].reduce((a, b) => a + b, 0)

  // The pace: burst + elapsed / interval key queries; each real key adds at most its tenant's.
  const { burst } = DEFAULT_KEY_BATCH_PACING
  const intervalMs = FLOOD_LOOKUP_INTERVAL_MS
  const bound = Math.ceil(burst + elapsedMs / intervalMs) + realStatuses.length
  t.same(
    [...statuses.keys()],
    [401],
    `every one of the ${flood} flood requests was 401 (${[...statuses].map(([s, n]) => `${s} ×${n}`).join(', ')})`,
  )
  // More flood keys than the pace allows queries: without the pace, one query a key would pass the
  // bound. (Not twice as many: a slow machine's flood may not reach that, and once is enough.)
  t.ok(flood > bound, `the flood (${flood} requests in ${Math.round(elapsedMs)} ms) outran the pace (${bound})`)
  t.ok(queries <= bound, `${queries} Postgres queries for ${flood} flood requests, at most ${bound}`)
  t.ok(digests >= flood, `yet every flood key was looked up (${digests} digests)`)
  t.ok(realStatuses.length >= REAL_KEYS, `${realStatuses.length} real keys tried during the flood`)
  t.same(
    realStatuses.filter((s) => s !== 200),
    [],
    `each of the ${realStatuses.length} keys minted during the flood was served (never 401 or 503)`,
  )
})

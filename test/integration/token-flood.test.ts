// A flood of token requests naming random client ids (a key id is a UUID: making one up costs
// nothing) against one gateway over real sockets, on real Postgres (docs/credentials.md): the
// Postgres queries it causes stay under the client lookups' pace (oauth/client-lookups.ts)
// whatever the flood's rate, and a real client still gets its token meanwhile.
import { randomUUID } from 'node:crypto'
import { Agent } from 'node:http'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { DEFAULT_KEY_BATCH_PACING } from '../../src/store/key-lookup-batcher.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { FLOOD_LOOKUP_INTERVAL_MS } from '../helpers/store-deadlines.js'
import { getOverAgent } from '../helpers/http.js'
import { sleep } from '../helpers/poll.js'
import { accessToken, clientKey } from '../helpers/tokens.js'

const FLOOD_MS = 10_000
/** Real token requests made during the flood, at least. */
const REAL_TOKENS = 10
const CONNECTIONS = 32

// A slower pace than production's, that the flood outruns however loaded the machine is.
const gw = await startGateway(t, { storeDeadlines: { lookupIntervalMs: FLOOD_LOOKUP_INTERVAL_MS } })
const parent = await gw.createParent()
const postgresQueries = () => metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'postgres' })
const clientIds = () => metricValue(gw.app, 'tgw_postgres_client_ids_total')
/** Transactions of the gateway's database as Postgres counts them (flushed about once a second). */
async function transactions(): Promise<number> {
  await sleep(1_500)
  const [row] =
    await gw.sql`select pg_stat_clear_snapshot(), xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()`
  return Number(row!.n)
}
const form = (id: string) => `grant_type=client_credentials&client_id=${id}&client_secret=not-the-secret`

t.test('random client ids at full speed for 10 s: Postgres queries bounded by the pace', async (t) => {
  const client = await clientKey(gw.url, parent)
  await accessToken(gw.url, client) // the pool and the endpoint warm before the count starts

  const transactionsBefore = await transactions()
  const queriesBefore = await postgresQueries()
  const idsBefore = await clientIds()
  const statuses = new Map<number, number>()
  const started = performance.now()
  const until = started + FLOOD_MS
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS })
  const headers = { 'content-type': 'application/x-www-form-urlencoded' }
  // The flood lasts FLOOD_MS, and longer while the real requests below are fewer than REAL_TOKENS.
  let realDone = false
  const worker = async () => {
    while (performance.now() < until || (!realDone && performance.now() < until + FLOOD_MS)) {
      const { status } = await getOverAgent(gw.url, agent, '/oauth2/token', headers, form(randomUUID()))
      statuses.set(status, (statuses.get(status) ?? 0) + 1)
    }
  }
  // Meanwhile the real client asks for a token now and then, each on a connection of its own.
  const real: string[] = []
  const realClient = async () => {
    try {
      await sleep(500)
      while (performance.now() < until - 500 || (real.length < REAL_TOKENS && performance.now() < until + FLOOD_MS)) {
        real.push(
          await accessToken(gw.url, client).then(
            () => '200',
            (err: Error) => err.message.slice(0, 60),
          ),
        )
        await sleep(400)
      }
    } finally {
      realDone = true // a real use that threw ends the flood too
    }
  }
  await Promise.all([...Array.from({ length: CONNECTIONS }, worker), realClient()])
  const elapsedMs = performance.now() - started
  agent.destroy()
  const queries = (await postgresQueries()) - queriesBefore
  const ids = (await clientIds()) - idsBefore
  const flood = [...statuses.values()].reduce((a, b) => a + b, 0)
  const transactionsDuring = (await transactions()) - transactionsBefore

  const { burst } = DEFAULT_KEY_BATCH_PACING
  const intervalMs = FLOOD_LOOKUP_INTERVAL_MS
  // Each real token request may start a query of its own (a lone lookup starts at once).
  const bound = Math.ceil(burst + elapsedMs / intervalMs) + real.length
  const shown = [...statuses].map(([s, n]) => `${s} ×${n}`).join(', ')
  // 401 invalid_client; under load a lookup that waited past its deadline is 503 (docs/api.md).
  t.same(
    [...statuses.keys()].filter((s) => s !== 401 && s !== 503),
    [],
    `flood answers: ${shown}`,
  )
  t.ok((statuses.get(401) ?? 0) > flood / 2, `most were looked up and refused: ${shown}`)
  t.ok(flood > 2 * bound, `the flood (${flood} requests in ${Math.round(elapsedMs)} ms) outran the pace (${bound})`)
  t.ok(queries <= bound, `${queries} Postgres queries for ${flood} flood requests, at most ${bound}`)
  // As Postgres saw it: the queries above, the real client's and the replica's own upkeep (usage
  // flushes, signing keys), not one transaction per flood request.
  const allowed = bound + Math.ceil((100 * elapsedMs) / FLOOD_MS) // the upkeep: 100 per FLOOD_MS
  t.ok(
    transactionsDuring <= allowed,
    `${transactionsDuring} Postgres transactions during the flood of ${flood}, at most ${allowed}`,
  )
  t.ok(ids >= statuses.get(401)!, `yet every refused id was looked up (${ids} ids)`)
  t.ok(real.length >= REAL_TOKENS, `${real.length} real token requests during the flood`)
  t.same(
    real.filter((outcome) => outcome !== '200'),
    [],
    `each of the ${real.length} token requests of the real client got its token`,
  )
})

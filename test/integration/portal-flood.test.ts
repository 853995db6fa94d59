// Floods of made-up portal credentials (their checksum is public: forging one costs nothing)
// against one gateway over real sockets, on real Postgres
// (docs/decisions/0189-portal-credentials-are-looked-up-like-keys-grouped.md): session tokens as
// bearers, as cookies, and link tokens at the exchange. The Postgres queries each flood causes stay
// under the paced lookups' bound (portal/credential-lookups.ts) whatever its rate, as Postgres
// itself counts them too, and a real session or link works meanwhile.
import { Agent } from 'node:http'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { generate, withChecksum } from '../../src/auth/key-format.js'
import { DEFAULT_KEY_BATCH_PACING } from '../../src/store/key-lookup-batcher.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { FLOOD_LOOKUP_INTERVAL_MS } from '../helpers/store-deadlines.js'
import { getOverAgent } from '../helpers/http.js'
import { sleep } from '../helpers/poll.js'

const FLOOD_MS = 4_000
/** Real uses of each kind during its flood, at least. */
const REAL_USES = 4
const CONNECTIONS = 32
const ALL = ['keys:read', 'keys:write', 'usage:read', 'requests:read']

// A slower pace than production's, that the flood outruns however loaded the machine is.
const gw = await startGateway(t, { storeDeadlines: { lookupIntervalMs: FLOOD_LOOKUP_INTERVAL_MS } })
const parent = await gw.createParent()
const postgresQueries = () => metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'postgres' })
const credentials = () => metricValue(gw.app, 'tgw_postgres_portal_credentials_total')
/** Transactions of the gateway's database as Postgres counts them (flushed about once a second). */
async function transactions(): Promise<number> {
  await sleep(1_500)
  const [row] =
    await gw.sql`select pg_stat_clear_snapshot(), xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()`
  return Number(row!.n)
}

const subAccount = (
  await gw.call(parent.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'customer' }, acting: 'self' })
).json().id as string

/** A fresh link's one-time token. */
async function linkToken(): Promise<string> {
  const res = await gw.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${subAccount}/portal-sessions`,
    body: { permissions: ALL },
    acting: 'self',
  })
  if (res.statusCode !== 201) throw new Error(`portal session: ${res.statusCode} ${res.body}`)
  return (res.json().url as string).split('#')[1]!
}

const json = { 'content-type': 'application/json' }
const agentFor = () => new Agent({ keepAlive: true, maxSockets: CONNECTIONS })

/** A session's credential, by exchanging a fresh link as an embedded page does not (a cookie's value). */
async function sessionSecret(): Promise<string> {
  const res = await getOverAgent(
    gw.url,
    agentFor(),
    '/portal/api/session',
    json,
    JSON.stringify({ token: await linkToken() }),
  )
  if (res.status !== 201) throw new Error(`exchange: ${res.status} ${res.body}`)
  return /tgw_portal=([^;]+)/.exec(String(res.headers['set-cookie']))![1]!
}

interface Flood {
  /** A made-up credential's request. */
  forged(): { path: string; headers: Record<string, string>; body?: string }
  /** One real use of the kind, meanwhile: its status. */
  real(): Promise<number>
  realStatus: number
}

const forgedSession = () => generate('tgwps_')
const forgedLink = () => generate('tgwpl_')

const FLOODS: Record<string, Flood> = {
  'session tokens as bearers': {
    forged: () => ({ path: '/portal/api/keys', headers: { authorization: `Bearer ${forgedSession()}` } }),
    real: async () => {
      const secret = await sessionSecret()
      return (await getOverAgent(gw.url, agentFor(), '/portal/api/keys', { authorization: `Bearer ${secret}` })).status
    },
    realStatus: 200,
  },
  'session cookies': {
    forged: () => ({ path: '/portal/api/session', headers: { cookie: `tgw_portal=${forgedSession()}` } }),
    real: async () => {
      const secret = await sessionSecret()
      return (await getOverAgent(gw.url, agentFor(), '/portal/api/session', { cookie: `tgw_portal=${secret}` })).status
    },
    realStatus: 200,
  },
  'link tokens at the exchange': {
    forged: () => ({ path: '/portal/api/session', headers: json, body: JSON.stringify({ token: forgedLink() }) }),
    real: async () =>
      (
        await getOverAgent(
          gw.url,
          agentFor(),
          '/portal/api/session',
          json,
          JSON.stringify({ token: await linkToken() }),
        )
      ).status,
    realStatus: 201,
  },
}

t.test('a made-up credential has the shape and checksum the gateway accepts', async (t) => {
  const made = forgedSession()
  t.equal(withChecksum(made.slice(0, -6)), made)
})

for (const [kind, flood] of Object.entries(FLOODS)) {
  t.test(`made-up ${kind} at full speed: Postgres queries bounded by the pace`, async (t) => {
    t.equal(await flood.real(), flood.realStatus, 'a real one works before the flood (and the pool is warm)')
    const transactionsBefore = await transactions()
    const queriesBefore = await postgresQueries()
    const credentialsBefore = await credentials()
    const statuses = new Map<number, number>()
    const started = performance.now()
    const until = started + FLOOD_MS
    const agent = agentFor()
    // The flood lasts FLOOD_MS, and longer while the real uses below are fewer than REAL_USES.
    let realDone = false
    const worker = async () => {
      while (performance.now() < until || (!realDone && performance.now() < until + FLOOD_MS)) {
        const { path, headers, body } = flood.forged()
        const { status } = await getOverAgent(gw.url, agent, path, headers, body)
        statuses.set(status, (statuses.get(status) ?? 0) + 1)
      }
    }
    // Meanwhile a real one now and then, each made anew (never seen by the gateway), on a connection of its own.
    const real: number[] = []
    const realUses = async () => {
      try {
        await sleep(300)
        while (performance.now() < until - 300 || (real.length < REAL_USES && performance.now() < until + FLOOD_MS)) {
          real.push(await flood.real())
          await sleep(300)
        }
      } finally {
        realDone = true // a real use that threw ends the flood too
      }
    }
    await Promise.all([...Array.from({ length: CONNECTIONS }, worker), realUses()])
    const elapsedMs = performance.now() - started
    agent.destroy()
    const queries = (await postgresQueries()) - queriesBefore
    const looked = (await credentials()) - credentialsBefore
    const transactionsDuring = (await transactions()) - transactionsBefore
    const forged = [...statuses.values()].reduce((a, b) => a + b, 0)

    const { burst } = DEFAULT_KEY_BATCH_PACING
    const intervalMs = FLOOD_LOOKUP_INTERVAL_MS
    // The pace of each kind's lookups (sessions and links have one each, and a real use may touch both).
    const bound = Math.ceil(burst + elapsedMs / intervalMs) + 2 * real.length
    const shown = [...statuses].map(([s, n]) => `${s} ×${n}`).join(', ')
    t.same([...statuses.keys()], [401], `every one of the ${forged} made-up credentials was 401 (${shown})`)
    t.ok(forged > bound, `the flood (${forged} requests in ${Math.round(elapsedMs)} ms) outran the pace (${bound})`)
    t.ok(queries <= bound, `${queries} Postgres lookups for ${forged} made-up credentials, at most ${bound}`)
    t.ok(looked >= forged, `yet every made-up credential was looked up (${looked})`)
    // As Postgres saw it: the lookups above, the real uses' own statements (the parent's management
    // calls, the exchange, the session's reads: under 20 each) and the replica's upkeep, not one
    // transaction per made-up credential.
    const allowed = bound + 20 * real.length + Math.ceil((100 * elapsedMs) / FLOOD_MS)
    t.ok(
      transactionsDuring <= allowed,
      `${transactionsDuring} Postgres transactions during the flood of ${forged}, at most ${allowed}`,
    )
    t.ok(real.length >= REAL_USES, `${real.length} real uses during the flood`)
    t.same(
      real.filter((s) => s !== flood.realStatus),
      [],
      `each of the ${real.length} real uses worked at once (${flood.realStatus}; never 401 or 503)`,
    )
  })
}

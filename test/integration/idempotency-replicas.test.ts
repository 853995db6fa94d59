// Idempotency keys across replicas (docs/api.md, Idempotency): two gateways, each with its own
// socket and its own Postgres pool on one database, get 20 POSTs with one Idempotency-Key at once.
// The claim is Postgres's unique key, not a replica's memory: one request runs, the others are
// replays of its answer or 409 idempotency_key_in_flight.
import t from 'tap'
import { startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'

const [a, b] = (await startReplicas(t, 2, { pool: {} })) as [TestGateway, TestGateway]

t.test('20 concurrent POSTs with one key on two replicas make one sub-account', async (t) => {
  const parent = await a.createParent()
  const post = (i: number) =>
    callAs(i % 2 === 0 ? a.url : b.url, parent.apiKey, {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      json: { name: 'once' },
      headers: [['Idempotency-Key', 'burst']],
    })
  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => post(i)))
  const ran = answers.filter((res) => res.status === 201 && res.headers['idempotent-replayed'] === undefined)
  const replays = answers.filter((res) => res.status === 201 && res.headers['idempotent-replayed'] === 'true')
  const inFlight = answers.filter((res) => res.status === 409 && res.json().code === 'idempotency_key_in_flight')
  t.equal(ran.length, 1, `one ran (${answers.map((res) => res.status).join(' ')})`)
  t.equal(replays.length + inFlight.length, 19, `the others are replays (${replays.length}) or in flight`)
  for (const replay of replays) t.equal(replay.body, ran[0]?.body, 'a replay is the answer of the one that ran')
  for (const refusal of inFlight) t.equal(refusal.headers['retry-after'], '1')
  const rows = await a.sql<{ n: number }[]>`select count(*)::int as n from tenants where parent_id = ${parent.id}`
  t.equal(rows[0]!.n, 1, 'one sub-account in the database')
})

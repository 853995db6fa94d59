// The replica's one limit simulation place, shared between parents (docs/api.md, The limit
// simulator): one parent asking for simulations back to back, two at a time, used to keep it busy
// so that another parent's were refused 429 (13 of 20 in the finding); now the other's wait for
// the place, which goes to the parents in turn, and each of them is answered.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  redis: false,
  usageFlushIntervalMs: 3_600_000,
  gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
})
const busy = await gw.createParent({ name: 'busy' })
const other = await gw.createParent({ name: 'other' })
const to = new Date().toISOString()
const from = new Date(Date.now() - 3_600_000).toISOString()

const simulate = (apiKey: string) =>
  callAs(gw.url, apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/limits/simulations',
    acting: 'self',
    json: { limits: { rate: { requests: 1, per_seconds: 60 } }, from, to },
  })

t.test("one parent's simulations back to back never keep another's out", async (t) => {
  let flooding = true
  const busyStatuses: number[] = []
  // Two at a time, each asking again as soon as it is answered: the place is never free for long.
  const flood = [0, 1].map(async () => {
    while (flooding) busyStatuses.push((await simulate(busy.apiKey)).status)
  })
  const statuses: number[] = []
  for (let i = 0; i < 20; i++) statuses.push((await simulate(other.apiKey)).status)
  flooding = false
  await Promise.all(flood)
  t.same(
    statuses.filter((status) => status !== 200),
    [],
    `the other parent's 20 simulations are answered (${busyStatuses.length} of the busy parent's meanwhile)`,
  )
  t.ok(busyStatuses.length > 0, "the busy parent's went on meanwhile")
  t.same(
    busyStatuses.filter((status) => status !== 200),
    [],
    "the busy parent's two at a time are within its own bound",
  )
})

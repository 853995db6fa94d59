// Names are data (docs/api.md, Units; docs/billing.md): a meter called `constructor`, the one
// name of Object.prototype's that a meter may take (`[a-z][a-z0-9_]{0,31}`), is a meter like any
// other, through a real proxied request whose upstream reports it in a header, its limits, the
// usage report, the usage by key, a simulation over the request log and the pulled export.
import type { ServerResponse } from 'node:http'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { startUpstream } from '../helpers/upstream.js'

const HOUR = 3_600_000
const MINUTE = 60_000
const iso = (ms: number) => `${new Date(ms).toISOString().slice(0, 19)}Z`

/** `?n=` comes back as the report of both meters. */
function answer(url: string, response: ServerResponse): void {
  const n = new URLSearchParams(url.split('?')[1] ?? '').get('n') ?? '0'
  response.writeHead(200, { 'content-type': 'text/plain', 'x-constructor': n, 'x-tokens': n })
  response.end('done')
}

const upstream = await startUpstream(t, (request, response) => answer(request.url!, response))
const T0 = Math.floor(Date.now() / MINUTE) * MINUTE - 10 * MINUTE
let clock = T0 + 10_000
const gw = await startGateway(t, {
  redis: false,
  usageFlushIntervalMs: HOUR,
  usagePeriods: { clock: () => clock, closeIntervalMs: HOUR },
  env: { USAGE_PERIOD_SECONDS: '60', USAGE_CLOSE_GRACE_SECONDS: '5' },
  gatewayConfig: {
    routes: [
      {
        prefix: '/llm',
        upstream: upstream.url,
        meters: [
          { name: 'constructor', header: 'X-Constructor' },
          { name: 'tokens', header: 'X-Tokens' },
        ],
      },
    ],
  },
})
const P = await gw.createParent({ name: 'P' })
const api = (method: string, path: string, json?: unknown) =>
  callAs(gw.url, P.apiKey, { method, path, acting: 'self', ...(json === undefined ? {} : { json }) })

const made = await api('POST', '/v1/sub-accounts', {
  name: 'A',
  external_id: 'a',
  limits: { meters: { constructor: { rate: null, monthly_quota: { units: 1000 } } } },
})
if (made.status !== 201) throw new Error(made.body)
const A = made.json().id as string
const from = new Date().toISOString()
for (const n of [5, 7, 11]) {
  const res = await callAs(gw.url, P.apiKey, { path: `/llm/x?n=${n}`, acting: A })
  if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
}
await gw.app.requestLog!.flush()
const to = new Date(Date.now() + 1).toISOString()
clock = T0 + MINUTE + 5_000
await gw.app.usageMeter.flush()
await gw.app.usagePeriods.close()

t.test('the usage report and the usage by key count a meter called constructor', async (t) => {
  const report = await api('GET', '/v1/sub-accounts/usage')
  t.equal(report.status, 200, report.body)
  const entry = (report.json().data as JsonBody[]).find((e) => e.sub_account_id === A)
  t.same(entry?.units, { requests: 3, constructor: 23, tokens: 23 })
  const byKey = await api('GET', `/v1/sub-accounts/${A}/usage`)
  t.equal(byKey.status, 200, byKey.body)
  t.same((byKey.json().data as JsonBody[])[0]?.units, { requests: 3, constructor: 23, tokens: 23 })
})

t.test('its limits charge it like any meter', async (t) => {
  const res = await api('GET', `/v1/sub-accounts/${A}`)
  t.equal(res.status, 200, res.body)
  t.same(res.json().limits.meters, { constructor: { rate: null, monthly_quota: { units: 1000 } } })
})

t.test('a simulation over the log counts it and limits it', async (t) => {
  const res = await api('POST', '/v1/sub-accounts/limits/simulations', {
    limits: { meters: { constructor: { monthly_quota: { units: 30 } } } },
    sub_account_id: A,
    from,
    to,
  })
  t.equal(res.status, 200, res.body)
  const [data] = res.json().data as JsonBody[]
  t.same(data?.units, { requests: 3, constructor: 23, tokens: 23 })
  t.equal(data?.requests, 3)
  // The month's use before the range counts: the same 23 units, which the meter dated ten minutes
  // back (its clock is the test's). 30 − 23 leaves 7: the first two are admitted, the third refused.
  t.equal(data?.would_refuse, 1, 'its quota counts the use before and refuses the third')
})

t.test('the export carries it', async (t) => {
  const res = await api('GET', `/v1/sub-accounts/usage/export?from=${iso(T0)}&to=${iso(T0 + MINUTE)}&format=ndjson`)
  t.equal(res.status, 200, res.body)
  const records = res.body
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line).data as JsonBody)
  t.same(records.map((r) => [r.meter, r.units]).sort(), [
    ['constructor', 23],
    ['requests', 3],
    ['tokens', 23],
  ])
})

t.test('metadata keys named after Object.prototype are kept as any other key', async (t) => {
  const metadata = { constructor: 'c', toString: 't', hasOwnProperty: 'h', valueOf: 'v' }
  const res = await api('POST', '/v1/sub-accounts', { name: 'M', metadata })
  t.equal(res.status, 201, res.body)
  t.same(res.json().metadata, metadata)
  const read = await api('GET', `/v1/sub-accounts/${res.json().id}`)
  t.same(read.json().metadata, metadata)
  // `__proto__` in a JSON body is refused with 400 invalid_json, as every body is (docs/api.md).
})

// Address headers the gateway does not vouch for are removed (docs/api.md, proxied requests):
// True-Client-IP and its kin, as X-Real-IP and Forwarded are, in every spelling a CGI, WSGI or
// Rack upstream reads alike (`_` and `.` for `-`, any case), unless the route's pass_headers names
// them; then every spelling of the named ones passes. A real upstream on a real socket.
import t, { type Test } from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest } from '../helpers/http.js'
import { type ReceivedRequest, startUpstream } from '../helpers/upstream.js'

const ADDRESS_HEADERS = [
  'True-Client-IP',
  'X-Client-IP',
  'Client-IP',
  'CF-Connecting-IP',
  'Fastly-Client-IP',
  'X-Cluster-Client-IP',
  'X-Originating-IP',
  'X-Remote-IP',
  'X-Remote-Addr',
]

/**
 * Every spelling of `name` an upstream may read as it: as written, lower and upper case, `_` or
 * `.` for every `-`, and the two mixed (`True_Client.IP`; `client.IP` where there is one `-`).
 */
function spellings(name: string): string[] {
  const parts = name.split('-')
  const mixed = parts.length > 2 ? `${parts[0]}_${parts.slice(1).join('.')}` : `${parts[0]!.toLowerCase()}.${parts[1]}`
  return [name, name.toLowerCase(), name.toUpperCase(), parts.join('_'), parts.join('.').toLowerCase(), mixed]
}

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  upstreamUrl: upstream.url,
  gatewayConfig: {
    routes: [{ prefix: '/vouched', upstream: upstream.url, pass_headers: ADDRESS_HEADERS }],
  },
})
const parent = await gw.createParent()

/** Sends every spelling of every address header, each with a value naming it; returns what the upstream got. */
async function sendAll(t: Test, path: string): Promise<{ sent: [string, string][]; got: ReceivedRequest }> {
  const sent: [string, string][] = []
  let n = 0
  for (const name of ADDRESS_HEADERS) {
    for (const spelling of spellings(name)) sent.push([spelling, `203.0.113.${++n}`])
  }
  const before = upstream.received.length
  const res = await rawRequest(gw.url, {
    path,
    headers: [['Authorization', `Bearer ${parent.apiKey}`], ...sent],
  })
  t.equal(res.status, 200, `${path}: 200 (${res.body.slice(0, 200)})`)
  t.equal(upstream.received.length, before + 1, `${path}: the upstream got it once`)
  return { sent, got: upstream.received.at(-1)! }
}

/**
 * The values the upstream got under `spelling`, in any case: the gateway's Node folds the
 * repeats of a name (`True-Client-IP`, `TRUE-CLIENT-IP`) into one comma-joined field.
 */
function valuesOf(got: ReceivedRequest, spelling: string): string[] {
  const values: string[] = []
  for (let i = 0; i < got.rawHeaders.length; i += 2)
    if (got.rawHeaders[i]!.toLowerCase() === spelling.toLowerCase()) values.push(...got.rawHeaders[i + 1]!.split(', '))
  return values
}

t.test('no spelling of an address header reaches the upstream', async (t) => {
  const { sent, got } = await sendAll(t, '/things/1')
  t.equal(sent.length, ADDRESS_HEADERS.length * 6, `${sent.length} spellings sent`)
  for (const [spelling, value] of sent) {
    t.same(valuesOf(got, spelling), [], `${spelling}: removed`)
    t.notOk(
      got.rawHeaders.some((field) => field.includes(value)),
      `${spelling}: its value is nowhere upstream`,
    )
  }
})

t.test('a route whose pass_headers names them lets every spelling through', async (t) => {
  const { sent, got } = await sendAll(t, '/vouched/things/1')
  for (const [spelling, value] of sent) t.ok(valuesOf(got, spelling).includes(value), `${spelling}: passes`)
})

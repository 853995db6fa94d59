// The client sees the gateway's limits (docs/api.md, limits and quotas): on an answer carrying
// the gateway's RateLimit fields, the upstream's own RateLimit and RateLimit-Policy members come
// after the gateway's, never in their place, and a member named as one of the gateway's policies
// is dropped. A tenant 2 requests from its limit, behind an upstream that says 9 are left, reads
// the gateway's count first. Real sockets, Postgres and Redis; the fields read as Structured
// Field lists (RFC 9651), as a client reads them.
import { type List, parseList, Token } from 'structured-headers'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { sleep } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

/** What the upstream says of its own limits, by the path's last segment. */
const UPSTREAM_FIELDS: Record<string, Record<string, string | string[]>> = {
  // Its own policy, and one named as the gateway's, telling another count.
  own: {
    ratelimit: '"default";r=9;t=30, "sub_account.rate";r=99;t=1',
    'ratelimit-policy': '"default";q=10;w=60, "sub_account.rate";q=100;w=1',
  },
  // Only members named as the gateway's: nothing of theirs is left.
  'same-name': { ratelimit: '"sub_account.rate";r=99;t=1', 'ratelimit-policy': 'sub_account.rate;q=100;w=1' },
  // Not a Structured Field list: dropped, the gateway's fields stay readable.
  garbage: { ratelimit: 'r=9, ;;; "unclosed', 'ratelimit-policy': '"default";q=10;w=60' },
  // Repeated fields, read as one list.
  repeated: { ratelimit: ['"a";r=1;t=1', '"b";r=2;t=2'] },
}

const upstream = await startUpstream(t, (request, response) => {
  const which = request.url!.split('?')[0]!.split('/').at(-1)!
  response.writeHead(200, { 'content-type': 'text/plain', ...UPSTREAM_FIELDS[which] }).end('done')
})
const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      { prefix: '/v1/things', upstream: upstream.url },
      { prefix: '/open', upstream: upstream.url, public: true },
    ],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })

async function subAccount(name: string, requests: number): Promise<string> {
  const res = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, limits: { rate: { requests, per_seconds: 600 } } },
  })
  if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${res.body}`)
  return res.json().id as string
}

/** A field as the client reads it: each member's name and parameters. */
function members(res: RawResponse, field: string): { name: string; params: Record<string, unknown> }[] {
  const value = res.headers[field]
  if (value === undefined) return []
  const list: List = parseList(Array.isArray(value) ? value.join(', ') : value)
  return list.map(([item, params]) => ({
    name: item instanceof Token ? item.toString() : String(item),
    params: Object.fromEntries(params),
  }))
}

const names = (res: RawResponse, field: string) => members(res, field).map((m) => m.name)

/**
 * A small limit leases a unit at a time, renewed in the background: requests a few ms apart may
 * find the renewal on its way (limits-proxy.test.ts); a pause between them lets it land.
 */
const renewal = () => sleep(150)

t.test("a tenant 2 requests from its limit reads the gateway's count first, the upstream's after", async (t) => {
  const sub = await subAccount('near-its-limit', 5)
  let last: RawResponse | undefined
  for (let i = 0; i < 3; i++) {
    last = await callAs(gw.url, parent.apiKey, { path: '/v1/things/own', acting: sub })
    t.equal(last.status, 200, `request ${i + 1} passes`)
    await renewal()
  }
  const res = last!
  const limit = members(res, 'ratelimit')
  t.equal(limit[0]?.name, 'sub_account.rate', "RateLimit's first member is the gateway's")
  const left = Number(limit[0]?.params.r)
  t.ok(left <= 2, `it tells what the gateway has left, at most 2 (${left}), not the upstream's 9`)
  t.same(
    limit.map((m) => m.name),
    ['sub_account.rate', 'default'],
    "the upstream's own member after it; its member named as the gateway's is dropped",
  )
  t.same(limit[1]?.params, { r: 9, t: 30 }, "the upstream's member as it sent it")
  t.same(
    members(res, 'ratelimit-policy'),
    [
      { name: 'sub_account.rate', params: { q: 5, w: 600 } },
      { name: 'default', params: { q: 10, w: 60 } },
    ],
    "RateLimit-Policy: the gateway's policy first, the upstream's after, the lookalike dropped",
  )
})

t.test("members named only as the gateway's leave the gateway's fields alone", async (t) => {
  const sub = await subAccount('same-name', 50)
  const res = await callAs(gw.url, parent.apiKey, { path: '/v1/things/same-name', acting: sub })
  t.equal(res.status, 200)
  t.same(names(res, 'ratelimit'), ['sub_account.rate'])
  t.same(members(res, 'ratelimit-policy'), [{ name: 'sub_account.rate', params: { q: 50, w: 600 } }])
})

t.test("an upstream field that is no list is dropped, the gateway's kept readable", async (t) => {
  const sub = await subAccount('garbage', 50)
  const res = await callAs(gw.url, parent.apiKey, { path: '/v1/things/garbage', acting: sub })
  t.equal(res.status, 200)
  t.same(names(res, 'ratelimit'), ['sub_account.rate'], "RateLimit: the gateway's alone")
  t.same(names(res, 'ratelimit-policy'), ['sub_account.rate', 'default'], 'RateLimit-Policy: the valid one merged')
})

t.test('repeated upstream fields are read as one list', async (t) => {
  const sub = await subAccount('repeated', 50)
  const res = await callAs(gw.url, parent.apiKey, { path: '/v1/things/repeated', acting: sub })
  t.same(names(res, 'ratelimit'), ['sub_account.rate', 'a', 'b'])
  t.same(names(res, 'ratelimit-policy'), ['sub_account.rate'])
})

t.test("without the gateway's fields (no limit), the upstream's pass as sent", async (t) => {
  const res = await callAs(gw.url, null, { path: '/open/own' })
  t.equal(res.status, 200)
  t.equal(res.headers.ratelimit, UPSTREAM_FIELDS.own!.ratelimit)
  t.equal(res.headers['ratelimit-policy'], UPSTREAM_FIELDS.own!['ratelimit-policy'])
})

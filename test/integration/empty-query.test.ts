// A query parameter sent with no value is taken as not sent (src/http/query-string.ts), on the
// management API and the portal's: each GET of the OpenAPI document, with every parameter it takes
// and one it does not, and the portal's lists, answer `?a=&b=` as they answer no query at all. A
// value that is given is checked as before, and one holding U+0000 is refused.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import type { LightMyRequestResponse } from 'fastify'
import { RequestsQuery } from '../../src/schemas/requests.js'
import { PageQuery } from '../../src/schemas/common.js'
import { startGateway } from '../helpers/gateway.js'
import type { JsonBody } from '../helpers/json.js'

const gw = await startGateway(t, {
  env: { ISSUER_URL: 'https://gw.example', WEBHOOKS_ALLOW_INSECURE: 'true' },
  // The requests' log is written only when the test is over: both calls of a pair see the same.
  requestLog: { flushIntervalMs: 3_600_000 },
})
const parent = await gw.createParent()

const manage = (method: string, path: string, body?: unknown) =>
  gw.call(parent.apiKey, { method: method as 'GET', url: `/v1/sub-accounts${path}`, body, acting: 'self' })

function ok(res: LightMyRequestResponse, status: number): JsonBody {
  if (res.statusCode !== status) throw new Error(`expected ${status}, got ${res.statusCode}: ${res.body}`)
  return res.json()
}

const sub = ok(await manage('POST', '', { name: 'customer' }), 201).id as string
const key = ok(await manage('POST', `/${sub}/api-keys`, { name: 'k', scopes: ['things:read'] }), 201)
const keyId = key.id as string
const endpoint = ok(
  await manage('POST', '/webhook-endpoints', { url: 'http://127.0.0.1:9/hook', event_types: ['sub_account.created'] }),
  201,
).id as string
const event = (ok(await manage('GET', '/events?limit=1'), 200).data as JsonBody[])[0]!.id as string

interface Operation {
  parameters?: { name: string; in: string }[]
}
const document = JSON.parse((await gw.app.inject({ method: 'GET', url: '/openapi.json' })).body) as {
  paths: Record<string, { get?: Operation }>
}
const PATH_VALUES: Record<string, string> = { sub_id: sub, key_id: keyId, event_id: event, endpoint_id: endpoint }

/** An unknown parameter, left blank: no parameter either. */
const UNKNOWN = 'not_a_parameter'

/** Every GET of the management API in the document: its path filled in, and its query's names. */
const reads = Object.entries(document.paths).flatMap(([template, item]) => {
  if (item.get === undefined || !template.startsWith('/v1/sub-accounts')) return []
  const names = [...(item.get.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name), UNKNOWN]
  // Any other id: one that names nothing, answered 404 with or without the blanks.
  const path = template.replace(/\{(\w+)\}/g, (_, name: string) => PATH_VALUES[name] ?? randomUUID())
  return [{ template, path, names }]
})

t.test('every GET answers its empty parameters as no query', async (t) => {
  t.ok(reads.filter((read) => read.names.length > 1).length >= 9, `${reads.length} operations, their queries blank`)
  for (const { template, path, names } of reads) {
    const plain = await gw.call(parent.apiKey, { method: 'GET', url: path, acting: 'self' })
    t.not(plain.statusCode, 400, `${template}: no 400 without a query`)
    const empty = `${path}?${names.map((name) => `${name}=`).join('&')}`
    const answer = await gw.call(parent.apiKey, { method: 'GET', url: empty, acting: 'self' })
    t.equal(answer.statusCode, plain.statusCode, `${template}: ${plain.statusCode} with ${names.join(', ')} empty`)
    // A problem names its own request: the same answer is the same code.
    // The usage export streams records (ndjson), not a JSON document.
    const body = (res: LightMyRequestResponse) =>
      res.statusCode !== 200
        ? res.json().code
        : /^application\/json/.test(String(res.headers['content-type']))
          ? res.json()
          : res.body
    t.same(body(answer), body(plain), `${template}: the same answer (${answer.body.slice(0, 200)})`)
  }
})

// Postgres stores no U+0000: a filter holding one is refused as bad input, never sent to a query
// that fails with a 500 (docs/api.md, Conventions).
t.test('every GET refuses a parameter holding U+0000 with a 400', async (t) => {
  for (const { template, path, names } of reads) {
    for (const name of names.filter((name) => name !== UNKNOWN)) {
      const answer = await gw.call(parent.apiKey, { method: 'GET', url: `${path}?${name}=a%00b`, acting: 'self' })
      t.equal(answer.statusCode, 400, `${template}?${name}=a%00b: 400 (${answer.body.slice(0, 200)})`)
    }
  }
})

t.test('a value that is given is checked as before; one sent twice is still refused', async (t) => {
  for (const [url, wanted] of [
    ['/v1/sub-accounts?limit=abc', 400],
    ['/v1/sub-accounts?status=', 200],
    ['/v1/sub-accounts?cursor=&cursor=', 400],
  ] as const) {
    const answer = await gw.call(parent.apiKey, { method: 'GET', url, acting: 'self' })
    t.equal(answer.statusCode, wanted, `${url}: ${wanted}`)
  }
  const unknown = await gw.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts?colour=red', acting: 'self' })
  t.equal(unknown.statusCode, 400, 'an unknown parameter with a value is refused')
  const unknownEmpty = await gw.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts?colour=', acting: 'self' })
  t.equal(unknownEmpty.statusCode, 200, 'an unknown parameter with no value is no parameter')
})

t.test("the portal's API: empty parameters are no parameters", async (t) => {
  const made = ok(await manage('POST', `/${sub}/portal-sessions`, { permissions: ['keys:read', 'requests:read'] }), 201)
  const token = (made.url as string).split('#')[1]!
  const exchanged = await gw.app.inject({
    method: 'POST',
    url: '/portal/api/session',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({ token }),
  })
  const cookie = /^tgw_portal=([^;]+)/.exec(String(exchanged.headers['set-cookie']))![1]!
  const portal = (url: string) =>
    gw.app.inject({ method: 'GET', url: `/portal/api${url}`, headers: { cookie: `tgw_portal=${cookie}` } })
  // The portal's requests take the parent's filters but sub_account_id (portal/api-routes.ts).
  const requestFilters = Object.keys(RequestsQuery.properties).filter((name) => name !== 'sub_account_id')
  for (const [path, names] of [
    ['/keys', [...Object.keys(PageQuery.properties), UNKNOWN]],
    ['/requests', [...requestFilters, UNKNOWN]],
  ] as const) {
    const plain = await portal(path)
    t.equal(plain.statusCode, 200, `${path}: 200 without a query`)
    const answer = await portal(`${path}?${names.map((name) => `${name}=`).join('&')}`)
    t.equal(answer.statusCode, 200, `${path}: 200 with ${names.join(', ')} empty (${answer.body.slice(0, 200)})`)
    t.same(answer.json(), plain.json(), `${path}: the same answer`)
    for (const name of names.filter((name) => name !== UNKNOWN)) {
      const nul = await portal(`${path}?${name}=a%00b`)
      t.equal(nul.statusCode, 400, `${path}?${name}=a%00b: 400 (${nul.body.slice(0, 200)})`)
    }
  }
})

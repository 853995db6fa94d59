// Leaked keys (docs/secret-scanning.md): GitHub's secret scanning report, signed with a P-256 key
// the test makes and serves from a loopback SECRET_SCANNING_KEYS_URL, and a parent's own report.
// Two replicas (A and B) share Postgres and a Redis prefix and keep records in-process for a
// minute, so that only the revocation's own message can make B refuse a key it knows.
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { checkProblem, problemOf } from '../helpers/problems.js'
import { redisClient, untilSubscribed } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

const SLOW_LOCAL_EXPIRY = { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 }
const PATH = '/v1/secret-scanning/github'

const github = generateKeyPairSync('ec', { namedCurve: 'P-256' })
const stranger = generateKeyPairSync('ec', { namedCurve: 'P-256' })
const KEY_ID = `test-${randomBytes(4).toString('hex')}`
let fetches = 0
const keyServer = createServer((_request, response) => {
  fetches++
  response.setHeader('content-type', 'application/json')
  response.end(
    JSON.stringify({
      public_keys: [
        { key_identifier: KEY_ID, key: github.publicKey.export({ type: 'spki', format: 'pem' }), is_current: true },
      ],
    }),
  )
})
await new Promise<void>((resolve) => keyServer.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>((resolve) => keyServer.close(() => resolve())))
const keysUrl = `http://127.0.0.1:${(keyServer.address() as AddressInfo).port}/meta/public_keys/secret_scanning`

const upstream = await startUpstream(t)
const [a, b] = (await startReplicas(t, 2, {
  upstreamUrl: upstream.url,
  cacheTimings: SLOW_LOCAL_EXPIRY,
  env: { SECRET_SCANNING_KEYS_URL: keysUrl, WEBHOOKS_ALLOW_INSECURE: 'true' },
})) as [TestGateway, TestGateway]
const sql = a.database.sql
await untilSubscribed(redisClient(t), a.redisKeyPrefix!, 2)

const parent = await a.createParent()
const other = await a.createParent({ name: 'another parent' })
const manage = (method: 'GET' | 'POST' | 'PATCH', url: string, body?: unknown, apiKey = parent.apiKey) =>
  a.call(apiKey, { method, url: `/v1/sub-accounts${url}`, acting: 'self', body })
const subId = (await manage('POST', '', { name: 'leaky' })).json().id as string

async function mint(apiKey = parent.apiKey, sub = subId): Promise<{ id: string; api_key: string }> {
  return (await manage('POST', `/${sub}/api-keys`, { name: 'k', scopes: ['orders:read'] }, apiKey)).json()
}

const proxied = (gw: TestGateway, apiKey: string) => callAs(gw.url, apiKey, { path: '/v1/orders' })

function report(items: unknown, options: { key?: typeof github; id?: string; signature?: string | null } = {}) {
  const body = JSON.stringify(items)
  const signature =
    options.signature === undefined
      ? sign('sha256', Buffer.from(body), (options.key ?? github).privateKey).toString('base64')
      : options.signature
  const headers: [string, string][] = [['Content-Type', 'application/json']]
  if (signature !== null) {
    headers.push(['Github-Public-Key-Identifier', options.id ?? KEY_ID])
    headers.push(['Github-Public-Key-Signature', signature])
  }
  return callAs(a.url, null, { method: 'POST', path: PATH, headers, body })
}

const item = (token: string, url = 'https://github.com/acme/app/blob/abc/.env') => ({
  token,
  type: 'tenancy_gateway_api_key',
  url,
  source: 'content',
})
const leakEvents = async (keyId: string) =>
  sql`select data, actor from events where type = 'api_key.leaked' and target ->> 'id' = ${keyId}`
const countEvents = async () => (await sql`select count(*)::int as n from events`)[0]!.n as number

t.test(
  'a signed report: live keys revoked on every replica, events, leaked on the record; again, nothing',
  async (t) => {
    const live = await mint()
    const revoked = await mint()
    t.equal((await manage('POST', `/${subId}/api-keys/${revoked.id}/revoke`)).statusCode, 200)
    t.equal((await proxied(b, live.api_key)).status, 200, 'B knows the live key')
    const nobody = `tgw_${'x'.repeat(49)}`
    const items = [item(live.api_key), item(revoked.api_key), item(nobody)]
    const res = await report(items)
    t.equal(res.status, 200, res.body.slice(0, 300))
    t.same(res.json(), [
      { token_raw: live.api_key, token_type: 'tenancy_gateway_api_key', label: 'true_positive' },
      { token_raw: revoked.api_key, token_type: 'tenancy_gateway_api_key', label: 'true_positive' },
      { token_raw: nobody, token_type: 'tenancy_gateway_api_key', label: 'false_positive' },
    ])
    checkProblem(t, await proxied(a, live.api_key), 401, 'unauthenticated', 'A refuses the leaked key')
    let last: RawResponse | null = null
    t.not(
      await eventually(1_000, async () => {
        last = await proxied(b, live.api_key)
        return last.status === 401
      }),
      null,
      `B refuses it within 1 s (last ${last === null ? 'none' : (last as RawResponse).status})`,
    )
    const shown = (await manage('GET', `/${subId}/api-keys/${live.id}`)).json()
    t.equal(shown.status, 'revoked')
    t.match(shown.leaked, { url: items[0]!.url, source: 'content', at: String })
    t.equal((await manage('GET', `/${subId}/api-keys/${revoked.id}`)).json().leaked, null, 'a revoked key: untouched')
    const events = await leakEvents(live.id)
    t.equal(events.length, 1, 'one api_key.leaked')
    t.same(events[0]!.data.object, {
      key_id: live.id,
      sub_account_id: subId,
      url: items[0]!.url,
      source: 'content',
      action: 'revoke',
    })
    t.equal(events[0]!.actor.type, 'gateway')
    t.equal((await leakEvents(revoked.id)).length, 0, 'no event for a key that was not live')

    const before = await countEvents()
    const again = await report(items)
    t.same(again.json(), res.json(), 'the same answer')
    t.equal(await countEvents(), before, 'and nothing changed')
  },
)

t.test("api_key.leaked goes to the account's webhooks", async (t) => {
  const owner = await a.createParent({ name: 'hooked' })
  const sub = (await manage('POST', '', { name: 's' }, owner.apiKey)).json().id
  const endpoint = await manage(
    'POST',
    '/webhook-endpoints',
    { url: 'http://127.0.0.1:9/hook', event_types: ['api_key.leaked'] },
    owner.apiKey,
  )
  t.equal(endpoint.statusCode, 201, endpoint.body)
  const key = await mint(owner.apiKey, sub)
  t.equal((await report([item(key.api_key)])).status, 200)
  const [queued] = await sql`select count(*)::int as n from webhook_deliveries d join events e on e.id = d.event_id
    where e.type = 'api_key.leaked' and e.target ->> 'id' = ${key.id} and d.endpoint_id = ${endpoint.json().id}`
  t.equal(queued!.n, 1, 'a delivery queued with the event')
})

t.test(
  "leak_policy alert: the key keeps working, marked, and the event says so; the setting's own event",
  async (t) => {
    const owner = await a.createParent({ name: 'alerting' })
    const sub = (await manage('POST', '', { name: 's' }, owner.apiKey)).json().id
    const key = await mint(owner.apiKey, sub)
    const set = await manage('PATCH', '/settings', { leak_policy: 'alert' }, owner.apiKey)
    t.equal(set.statusCode, 200, set.body)
    t.same(set.json(), { default_plan_id: null, leak_policy: 'alert' })
    const [setting] =
      await sql`select data from events where account_id = ${owner.id} and type = 'account.settings_updated'`
    t.same(setting!.data, {
      object: { default_plan_id: null, leak_policy: 'alert' },
      previous: { leak_policy: 'revoke' },
    })
    t.match(problemOf(await manage('PATCH', '/settings', { leak_policy: 'never' }, owner.apiKey)), {
      status: 400,
      code: 'validation_failed',
    })
    t.equal((await report([item(key.api_key)])).json()[0].label, 'true_positive')
    t.equal((await proxied(b, key.api_key)).status, 200, 'still works')
    const shown = (await manage('GET', `/${sub}/api-keys/${key.id}`, undefined, owner.apiKey)).json()
    t.equal(shown.status, 'active')
    t.match(shown.leaked, { source: 'content' })
    t.equal((await leakEvents(key.id))[0]!.data.object.action, 'alert')
    const marked = (await manage('GET', `/${sub}/api-keys/${key.id}`, undefined, owner.apiKey)).json().leaked
    await report([item(key.api_key, 'https://github.com/acme/other/blob/def/config.js')])
    t.equal((await leakEvents(key.id)).length, 1, 'reported again, still live: no second event')
    const now = (await manage('GET', `/${sub}/api-keys/${key.id}`, undefined, owner.apiKey)).json().leaked
    t.same(now, marked, 'the first mark kept')
  },
)

t.test(
  'unsigned, wrongly signed or under an unknown key: 401, nothing changed; GitHub asked at most once a minute',
  async (t) => {
    const key = await mint()
    const before = await countEvents()
    const items = [item(key.api_key)]
    checkProblem(t, await report(items, { signature: null }), 401, 'signature_invalid', 'unsigned')
    checkProblem(t, await report(items, { key: stranger }), 401, 'signature_invalid', 'signed by another key')
    checkProblem(t, await report(items, { signature: 'bm90IGEgc2lnbmF0dXJl' }), 401, 'signature_invalid', 'garbage')
    const fetchesBefore = fetches
    checkProblem(t, await report(items, { id: 'unknown-1' }), 401, 'signature_invalid', 'an unknown identifier')
    checkProblem(t, await report(items, { id: 'unknown-2' }), 401, 'signature_invalid', 'another one')
    t.ok(fetches - fetchesBefore <= 1, `the keys fetched again at most once (${fetches - fetchesBefore})`)
    t.equal(await countEvents(), before, 'nothing changed')
    t.equal((await proxied(a, key.api_key)).status, 200, 'the key still works')
  },
)

t.test("a parent reports a key of its own: its policy applied; another's or none: 404", async (t) => {
  const key = await mint()
  const res = await manage('POST', '/api-keys/leaks', { key: key.api_key })
  t.equal(res.statusCode, 200, res.body)
  t.match(res.json(), { id: key.id, status: 'revoked', sub_account_id: subId, leaked: { source: 'parent', url: null } })
  t.equal((await leakEvents(key.id))[0]!.data.object.action, 'revoke')
  t.not(await eventually(1_000, async () => (await proxied(b, key.api_key)).status === 401), null, 'B refuses it')
  const again = await manage('POST', '/api-keys/leaks', { key: key.api_key })
  t.same(again.json(), res.json(), 'again: the same, nothing changed')
  t.equal((await leakEvents(key.id)).length, 1)
  const otherSub = (await manage('POST', '', { name: 'theirs' }, other.apiKey)).json().id
  const theirs = await mint(other.apiKey, otherSub)
  const refused = problemOf(await manage('POST', '/api-keys/leaks', { key: theirs.api_key }))
  t.match(refused, { status: 404, code: 'not_found' }, "another's key")
  t.same(
    problemOf(await manage('POST', '/api-keys/leaks', { key: 'no-such-key-anywhere' })).detail,
    refused.detail,
    'none: the same',
  )
  t.equal((await proxied(a, theirs.api_key)).status, 200, "another's key untouched")
})

t.test('a report of 1,000 tokens, half of them live keys of ours', async (t) => {
  const keys = await Promise.all(Array.from({ length: 500 }, () => mint()))
  const items = [
    ...keys.map((k) => item(k.api_key)),
    ...Array.from({ length: 500 }, () => item(`tgw_${randomBytes(30).toString('base64url')}`)),
  ]
  const started = performance.now()
  const res = await report(items)
  const took = performance.now() - started
  t.equal(res.status, 200, res.body.slice(0, 200))
  const labels = (res.json() as { label: string }[]).map((r) => r.label)
  t.equal(labels.filter((l) => l === 'true_positive').length, 500)
  t.equal(labels.filter((l) => l === 'false_positive').length, 500)
  const [revoked] = await sql`select count(*)::int as n from api_keys
    where id in ${sql(keys.map((k) => k.id))} and status = 'revoked' and leaked_at is not null`
  t.equal(revoked!.n, 500, 'every live key revoked and marked')
  t.comment(`1,000 tokens answered in ${took.toFixed(0)} ms`)
})

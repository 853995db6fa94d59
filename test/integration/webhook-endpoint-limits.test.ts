// A parent's webhook endpoints are bounded (docs/api.md, Webhook endpoints): at most
// WEBHOOK_ENDPOINTS_MAX of them (409 limit_reached) and each URL once, however it is spelled
// (409 url_conflict); deleted endpoints count for neither, and concurrent creates cannot pass
// the cap together. Over real sockets against real Postgres.
import t from 'tap'
import { eventsOf } from '../helpers/events.js'
import { startGateway } from '../helpers/gateway.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'
const MAX = 20 // the default: no WEBHOOK_ENDPOINTS_MAX in the environment

const gw = await startGateway(t)
const sql = gw.sql

/** A create over the listening socket; `status` and the parsed body. */
async function create(apiKey: string, url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${gw.url}${PATH}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${apiKey}`,
      'x-service-acting-tenant': 'self',
      'content-type': 'application/json',
    },
    body: JSON.stringify({ url, event_types: ['api_key.*'] }),
  })
  return { status: res.status, body: (await res.json()) as Record<string, unknown> }
}

const liveCount = async (accountId: string) =>
  Number(
    (
      await sql`select count(*)::int as n from webhook_endpoints where account_id = ${accountId} and status <> 'deleted'`
    )[0]!.n,
  )

t.test(`a parent has at most ${MAX} endpoints: 409 limit_reached past it, nothing written`, async (t) => {
  const parent = await gw.createParent({ name: 'capped' })
  const made: string[] = []
  for (let n = 0; n < MAX; n++) {
    const res = await create(parent.apiKey, `https://1.1.1.1/cap/${n}`)
    t.equal(res.status, 201, JSON.stringify(res.body))
    made.push(String(res.body.id))
  }
  const eventsBefore = (await eventsOf(sql, parent.id)).length
  const over = await create(parent.apiKey, 'https://1.1.1.1/cap/over')
  t.equal(over.status, 409)
  t.equal(over.body.code, 'limit_reached')
  t.match(over.body.detail, /WEBHOOK_ENDPOINTS_MAX \(20\).*delete one first/)
  t.equal(await liveCount(parent.id), MAX, 'no endpoint written')
  t.equal((await eventsOf(sql, parent.id)).length, eventsBefore, 'no event written')

  const other = await gw.createParent({ name: 'uncapped' })
  t.equal((await create(other.apiKey, 'https://1.1.1.1/cap/over')).status, 201, "another parent's cap is its own")

  const deleted = await gw.call(parent.apiKey, { method: 'DELETE', url: `${PATH}/${made[0]}`, acting: 'self' })
  t.equal(deleted.statusCode, 204)
  t.equal((await create(parent.apiKey, 'https://1.1.1.1/cap/over')).status, 201, 'a deleted endpoint frees its place')
})

t.test('one URL once, however spelled: 409 url_conflict naming the endpoint', async (t) => {
  const parent = await gw.createParent({ name: 'one url' })
  const first = await create(parent.apiKey, 'https://1.1.1.1/hooks/a')
  t.equal(first.status, 201)
  // The same URL as WHATWG parses it: scheme case, default port, dot segments, the IPv4 address
  // as one number, in hex or with a trailing dot, and a fragment (never sent).
  for (const spelling of [
    'https://1.1.1.1/hooks/a',
    'HTTPS://1.1.1.1:443/hooks/a',
    'https://1.1.1.1/hooks/./a',
    'https://1.1.1.1/hooks/x/../a',
    'https://16843009/hooks/a',
    'https://0x1.0x1.0x1.0x1/hooks/a',
    'https://1.1.1.1./hooks/a',
    'https://1.1.1.1/hooks/a#frag',
  ]) {
    const res = await create(parent.apiKey, spelling)
    t.equal(res.status, 409, spelling)
    t.equal(res.body.code, 'url_conflict', spelling)
    t.match(res.body.detail, new RegExp(`webhook endpoint ${first.body.id} already has this url`), spelling)
  }
  t.equal(await liveCount(parent.id), 1, 'nothing more written')

  t.equal((await create(parent.apiKey, 'https://1.1.1.1/hooks/a?v=2')).status, 201, 'another query is another URL')
  t.equal((await create(parent.apiKey, 'https://1.1.1.1/hooks/a/')).status, 201, 'another path is another URL')
  const other = await gw.createParent({ name: 'same url elsewhere' })
  t.equal((await create(other.apiKey, 'https://1.1.1.1/hooks/a')).status, 201, 'another parent may have it')

  // Disabled (by the delivery worker) still holds its URL; deleted does not.
  await sql`update webhook_endpoints set status = 'disabled', disabled_at = now(), disabled_reason = 'gone'
            where id = ${String(first.body.id)}`
  t.equal((await create(parent.apiKey, 'https://1.1.1.1/hooks/a')).body.code, 'url_conflict', 'disabled: still taken')
  const deleted = await gw.call(parent.apiKey, { method: 'DELETE', url: `${PATH}/${first.body.id}`, acting: 'self' })
  t.equal(deleted.statusCode, 204)
  t.equal((await create(parent.apiKey, 'https://1.1.1.1/hooks/a')).status, 201, 'deleted: the URL is free again')
})

t.test(`${MAX + 10} creates at once: exactly ${MAX} made, the rest limit_reached`, async (t) => {
  const parent = await gw.createParent({ name: 'racing' })
  const results = await Promise.all(
    Array.from({ length: MAX + 10 }, (_, n) => create(parent.apiKey, `https://1.1.1.1/race/${n}`)),
  )
  t.equal(results.filter((res) => res.status === 201).length, MAX)
  t.same(
    results.filter((res) => res.status !== 201).map((res) => res.body.code),
    Array(10).fill('limit_reached'),
  )
  t.equal(await liveCount(parent.id), MAX)
})

t.test('10 creates of one URL at once: exactly one made, the rest url_conflict', async (t) => {
  const parent = await gw.createParent({ name: 'racing one url' })
  const results = await Promise.all(Array.from({ length: 10 }, () => create(parent.apiKey, 'https://1.1.1.1/same')))
  t.equal(results.filter((res) => res.status === 201).length, 1)
  t.same(
    results.filter((res) => res.status !== 201).map((res) => res.body.code),
    Array(9).fill('url_conflict'),
  )
  t.equal(await liveCount(parent.id), 1)
})

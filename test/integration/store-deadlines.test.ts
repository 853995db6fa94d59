// The store deadlines are the app's (src/store/deadlines.ts): every place that waits on Postgres
// (a key's lookup, an OAuth client's, a portal session's, a management call's store work, a read
// of the request log) waits as long as the app's tuning says. Tests rely on it: their gateways
// wait longer than 500 ms (helpers/store-deadlines.ts), since a loaded machine may queue a query.
import t from 'tap'
import { STORE_DEADLINES } from '../../src/store/deadlines.js'
import { startGateway, type TestGateway } from '../helpers/gateway.js'
import { holding } from '../helpers/held-transaction.js'
import { sleep } from '../helpers/poll.js'
import { clientKey, tokenRequest } from '../helpers/tokens.js'

async function portalCookie(gw: TestGateway, parent: { apiKey: string }, sub: string): Promise<string> {
  const made = await gw.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${sub}/portal-sessions`,
    acting: 'self',
    body: { permissions: ['keys:read'] },
  })
  const token = (made.json().url as string).split('#')[1]!
  const exchanged = await gw.app.inject({
    method: 'POST',
    url: '/portal/api/session',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({ token }),
  })
  return /^tgw_portal=([^;]+)/.exec(String(exchanged.headers['set-cookie']))![1]!
}

t.test('every wait on Postgres is as long as the app is told, none is 500 ms or 1.5 s', async (t) => {
  const gw = await startGateway(t, { storeDeadlines: { lookupMs: 120_000, managementMs: 120_000 } })
  const client = await clientKey(gw.url, await gw.createParent())
  const cookie = await portalCookie(gw, { apiKey: client.parentKey }, client.subId)
  // A key never looked up yet: its lookup goes to Postgres.
  const fresh = await gw.createParent()

  const release = await holding(gw.database.url, 'lock table api_keys, portal_sessions, request_log_rows')
  const settled = new Set<string>()
  const watched = <T>(name: string, answer: Promise<T>) => answer.finally(() => settled.add(name))
  const answers = Promise.all([
    watched(
      'a management call (its key lookup, its store work)',
      gw.call(fresh.apiKey, { method: 'GET', url: '/v1/sub-accounts', acting: 'self' }),
    ).then((res) => res.statusCode),
    watched(
      'a read of the request log (by a key looked up already)',
      gw.call(client.parentKey, { method: 'GET', url: '/v1/sub-accounts/requests', acting: 'self' }),
    ).then((res) => res.statusCode),
    watched(
      "a token request (its client's lookup)",
      tokenRequest(gw.url, {
        form: { grant_type: 'client_credentials', client_id: client.keyId, client_secret: client.clientSecret },
      }),
    ).then((res) => res.status),
    watched(
      "a portal call (its session's lookup, its store work)",
      gw.app.inject({ method: 'GET', url: '/portal/api/keys', headers: { cookie: `tgw_portal=${cookie}` } }),
    ).then((res) => res.statusCode),
  ])
  // Past the gateway's own deadlines (500 ms, 1.5 s), with room for a loaded machine's timers.
  await sleep(STORE_DEADLINES.managementMs * 2)
  t.same([...settled], [], 'nothing was answered while Postgres was held')
  await release()
  t.same(await answers, [200, 200, 200, 200], 'each is answered once Postgres is')
})

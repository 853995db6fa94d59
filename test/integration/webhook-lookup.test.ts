// A webhook URL's name resolving slowly at creation (docs/api.md, Webhook endpoints): the lookup
// is bounded on its own (1.5 s), refused as a name that does not resolve, before anything is
// written, and its wait is not charged to the store deadline. An injected resolver, no real DNS.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { sleep } from '../helpers/poll.js'
import { problemOf } from '../helpers/problems.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'
const PUBLIC = [{ address: '93.184.216.34', family: 4 }]
/** How long each name takes to resolve, in ms. */
const DELAYS: Record<string, number> = { 'slow.example.com': 3_000, 'unhurried.example.com': 1_450 }

let lookups = 0
const gw = await startGateway(t, {
  listen: false,
  redis: false,
  webhookLookup: async (hostname) => {
    lookups++
    await sleep(DELAYS[hostname] ?? 0)
    return PUBLIC
  },
})
const parent = await gw.createParent()
// No Idempotency-Key: what keeps a late lookup from writing is its own bound.
const create = (host: string) =>
  gw.call(parent.apiKey, {
    method: 'POST',
    url: PATH,
    acting: 'self',
    body: { url: `https://${host}/hook`, event_types: ['api_key.*'] },
  })
const count = async (query: string) => Number((await gw.sql.unsafe(query, [parent.id]))[0]!.n as number)
const endpoints = () => count('select count(*)::int as n from webhook_endpoints where account_id = $1')
const events = () => count('select count(*)::int as n from events where account_id = $1')

t.test('a name that takes longer than 1.5 s: 400 at 1.5 s, and nothing made when it answers', async (t) => {
  const started = Date.now()
  const res = await create('slow.example.com')
  const took = Date.now() - started
  t.equal(res.statusCode, 400, res.body)
  const problem = problemOf(res)
  t.equal(problem.code, 'validation_failed')
  t.same(problem.errors, [{ path: '/body/url', message: 'url host slow.example.com did not resolve within 1500 ms' }])
  t.ok(took >= 1_450 && took < 2_500, `answered at the lookup's bound (${took} ms), not when it answers`)
  await sleep(3_300 - took) // the lookup answers meanwhile
  t.equal(lookups, 1)
  t.equal(await endpoints(), 0, 'no endpoint made once the lookup answered')
  t.equal(await events(), 0, 'no event')
  t.equal((await create('slow.example.com')).statusCode, 400, 'again: resolved again, refused again')
  t.equal(lookups, 2)
})

t.test("the resolver's wait is not store work: 1.45 s of it, then the write, is a 201", async (t) => {
  const res = await create('unhurried.example.com')
  t.equal(res.statusCode, 201, res.body)
  t.equal(await endpoints(), 1)
})

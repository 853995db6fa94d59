// A webhook URL's name resolving slowly at creation (docs/api.md, Webhook endpoints): the lookup
// is bounded on its own (1.5 s), refused as a name that does not resolve, before anything is
// written, and its wait is not charged to the store deadline. An injected resolver, no real DNS.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { sleep, until } from '../helpers/poll.js'
import { problemOf } from '../helpers/problems.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'
const PUBLIC = [{ address: '93.184.216.34', family: 4 }]
/** How long each name takes to resolve, in ms. */
const DELAYS: Record<string, number> = { 'unhurried.example.com': 1_450 }

let lookups = 0
/**
 * The slow name answers only when the test releases it: that the refusal came at the bound, not
 * when the name answered, is proved by order (the answer is still pending), not by a clock.
 */
const pendingSlow: (() => void)[] = []
let slowAnswered = 0
const releaseSlow = () => {
  for (const release of pendingSlow.splice(0)) release()
}
const gw = await startGateway(t, {
  listen: false,
  redis: false,
  webhookLookup: async (hostname) => {
    lookups++
    if (hostname === 'slow.example.com') {
      await new Promise<void>((resolve) => pendingSlow.push(resolve))
      slowAnswered++
      return PUBLIC
    }
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
  const res = await create('slow.example.com')
  t.equal(res.statusCode, 400, res.body)
  const problem = problemOf(res)
  t.equal(problem.code, 'validation_failed')
  t.same(problem.errors, [{ path: '/body/url', message: 'url host slow.example.com did not resolve within 1500 ms' }])
  t.equal(slowAnswered, 0, 'refused at the lookup bound, while the lookup still hangs')
  t.equal(pendingSlow.length, 1)
  releaseSlow() // the lookup answers now, after the refusal
  t.ok(await until(5_000, async () => slowAnswered === 1), 'the late answer arrived')
  t.equal(lookups, 1)
  t.equal(await endpoints(), 0, 'no endpoint made once the lookup answered')
  t.equal(await events(), 0, 'no event')
  t.equal((await create('slow.example.com')).statusCode, 400, 'again: resolved again, refused again')
  t.equal(lookups, 2)
  releaseSlow()
})

t.test("the resolver's wait is not store work: 1.45 s of it, then the write, is a 201", async (t) => {
  const res = await create('unhurried.example.com')
  t.equal(res.statusCode, 201, res.body)
  t.equal(await endpoints(), 1)
})

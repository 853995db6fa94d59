// A web app on another origin calls a keyed route from a real browser (docs/api.md, Browsers on
// other origins): Chromium's own CORS checks, not a test's reading of them. The app's pages are
// served from 127.0.0.1 on ports of their own, the gateway is called as localhost: two origins.
// The allowed page's fetch, which needs a preflight (a JSON POST with a key and the acting
// header), gets the answer and reads its RateLimit fields and X-Request-Id; its 429 it can read
// too. A page of an origin not allowed gets nothing: the browser refuses the answer, and the
// upstream never hears of the call.
import { createServer } from 'node:http'
import t from 'tap'
import { launchBrowser } from '../helpers/browser.js'
import { managementAs, startGateway } from '../helpers/gateway.js'
import type { JsonBody } from '../helpers/json.js'
import { listenOnLoopback, startUpstream } from '../helpers/upstream.js'

/** The app's page: calls the gateway twice as `key` acting as `tenant`, the outcome in its title. */
function appPage(gatewayUrl: string, key: string, tenant: string): string {
  return `<!doctype html><title>loading</title><script>
(async () => {
  const call = async () => {
    try {
      const res = await fetch(${JSON.stringify(`${gatewayUrl}/v1/things/42`)}, {
        method: 'POST',
        headers: { authorization: 'Bearer ${key}', 'x-service-acting-tenant': '${tenant}', 'content-type': 'application/json' },
        body: JSON.stringify({ n: 1 }),
      })
      return { status: res.status, body: await res.text(), ratelimit: res.headers.get('ratelimit'),
        policy: res.headers.get('ratelimit-policy'), retryAfter: res.headers.get('retry-after'),
        requestId: res.headers.get('x-request-id') }
    } catch (e) { return { error: e.name } }
  }
  const out = [await call(), await call()]
  document.title = 'DONE ' + JSON.stringify(out)
})()
</script>`
}

const upstream = await startUpstream(t, (request, response) => {
  response.writeHead(200, { 'content-type': 'application/json' })
  response.end(JSON.stringify({ method: request.method, path: request.url }))
})

/** A server of the app's pages, on a loopback port of its own; the page is set once the gateway is up. */
async function pageServer() {
  let html = ''
  const server = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/html' }).end(html)
  })
  const { port } = await listenOnLoopback(t, server)
  return { origin: `http://127.0.0.1:${port}`, setPage: (page: string) => (html = page) }
}
const allowedApp = await pageServer()
const otherApp = await pageServer()

const gateway = await startGateway(t, {
  gatewayConfig: {
    routes: [
      {
        prefix: '/v1/things',
        upstream: upstream.url,
        scopes: { read: ['things:read'], write: ['things:write'] },
        cors: { origins: [allowedApp.origin], methods: ['GET', 'POST'] },
      },
    ],
  },
})
const gatewayUrl = gateway.url.replace('127.0.0.1', 'localhost')
const parent = await gateway.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:write'] })
const manage = managementAs(gateway, parent.apiKey)
const tenant = (await manage('POST', '', { name: 'Browser app', limits: { rate: { requests: 1, per_seconds: 600 } } }))
  .id as string
allowedApp.setPage(appPage(gatewayUrl, parent.apiKey, tenant))
otherApp.setPage(appPage(gatewayUrl, parent.apiKey, tenant))

const browser = await launchBrowser(t)
const context = await browser.newContext()
t.teardown(() => context.close())

async function outcomeOf(origin: string): Promise<JsonBody[]> {
  const page = await context.newPage()
  page.setDefaultTimeout(20_000)
  await page.goto(`${origin}/app.html`)
  await page.waitForFunction(() => document.title.startsWith('DONE '))
  const out = JSON.parse((await page.title()).slice(5)) as JsonBody[]
  await page.close()
  return out
}

t.test('a page of an origin not allowed cannot call the route', async (t) => {
  const before = upstream.received.length
  const [first, second] = await outcomeOf(otherApp.origin)
  t.equal(first!.error, 'TypeError', 'the browser refuses the call (a failed fetch)')
  t.equal(second!.error, 'TypeError', 'every time')
  t.equal(upstream.received.length, before, 'the upstream never heard of it')
})

t.test("the allowed origin's page calls the route and reads the answer and its limits", async (t) => {
  const [first, second] = await outcomeOf(allowedApp.origin)
  t.equal(first!.status, 200, `the call answered: ${JSON.stringify(first)}`)
  t.same(JSON.parse(String(first!.body)), { method: 'POST', path: '/v1/things/42' }, 'the body read')
  t.match(first!.ratelimit, /r=0/, 'RateLimit read: nothing left of the limit of one')
  t.match(first!.policy, /q=1;w=600/, 'RateLimit-Policy read')
  t.match(first!.requestId, /\S/, 'X-Request-Id read')
  t.equal(second!.status, 429, `the next one refused, and the refusal read: ${JSON.stringify(second)}`)
  t.match(second!.body, /rate_limited/, 'its problem read')
  t.match(second!.retryAfter, /^\d+$/, 'Retry-After read')
})

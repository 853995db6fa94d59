// A public route's answers are sandboxed (docs/api.md, "What comes back";
// docs/decisions/0072-a-public-routes-answers-are-sandboxed.md), over real sockets against a real
// upstream: every answer of a `public: true` route, the gateway's own refusals included, carries
// `Content-Security-Policy: sandbox …` without `allow-same-origin`, so that a page its upstream
// serves cannot use the portal's cookie on the shared origin; an upstream's own policy is kept, the
// sandbox a second header after it; a keyed route's answers and those of a route with
// `same_origin_documents: true` carry none of the gateway's. The page in a browser is
// test/console/public-sandbox.test.ts.
import t from 'tap'
import { request } from 'undici'
import { PUBLIC_ROUTE_CSP } from '../../src/proxy/answer-headers.js'
import { startGateway } from '../helpers/gateway.js'
import { startUpstream } from '../helpers/upstream.js'

const SANDBOX = 'sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads'
const THEIRS = "default-src 'self'"

// `?csp=1` or `?csp=2`: that many policies of the upstream's own; the body is always a page.
const upstream = await startUpstream(t, (req, response) => {
  const csp = new URL(req.url!, 'http://upstream').searchParams.get('csp')
  if (csp === '1') response.setHeader('content-security-policy', THEIRS)
  if (csp === '2') response.setHeader('content-security-policy', [THEIRS, "img-src 'none'"])
  response.writeHead(200, { 'content-type': 'text/html' })
  response.end('<!doctype html><title>upstream page</title>')
})

const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      { prefix: '/public', upstream: upstream.url, public: true },
      { prefix: '/same-origin', upstream: upstream.url, public: true, same_origin_documents: true },
      { prefix: '/api', upstream: upstream.url, scopes: { read: ['api:read'] } },
      // Nothing listens there: the gateway's own 502.
      { prefix: '/down', upstream: 'http://127.0.0.1:9', public: true },
    ],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'api:read'] })

async function answerOf(path: string, headers: Record<string, string> = {}) {
  const answer = await request(`${gw.url}${path}`, { headers })
  const body = await answer.body.text()
  return { status: answer.statusCode, csp: answer.headers['content-security-policy'], body }
}

t.test('the sandbox is the one documented: scripts run, in an opaque origin', async (t) => {
  t.equal(PUBLIC_ROUTE_CSP, SANDBOX)
  t.notMatch(PUBLIC_ROUTE_CSP, /allow-same-origin/, 'never the origin')
})

t.test("every answer of a public route is sandboxed, beside the upstream's own policy", async (t) => {
  const page = await answerOf('/public/evil.html')
  t.equal(page.status, 200)
  t.match(page.body, /upstream page/, "the upstream's page")
  t.equal(page.csp, SANDBOX, 'the sandbox, once')
  t.same((await answerOf('/public/evil.html?csp=1')).csp, [THEIRS, SANDBOX], 'theirs kept, ours after it')
  t.same(
    (await answerOf('/public/evil.html?csp=2')).csp,
    [THEIRS, "img-src 'none'", SANDBOX],
    'two of theirs kept, in order, ours last',
  )
  const head = await request(`${gw.url}/public/evil.html`, { method: 'HEAD' })
  await head.body.dump()
  t.equal(head.headers['content-security-policy'], SANDBOX, 'a HEAD too')
  const refused = await answerOf('/public/sw.js', { 'service-worker': 'script' })
  t.equal(refused.status, 403, "the gateway's own refusal on the route")
  t.equal(refused.csp, SANDBOX, 'is sandboxed too')
  const down = await answerOf('/down/page')
  t.equal(down.status, 502, "the gateway's 502 of an upstream away")
  t.equal(down.csp, SANDBOX, 'is sandboxed too')
})

t.test('no sandbox on a keyed route, nor on a public route that opts out', async (t) => {
  const auth = { authorization: `Bearer ${parent.apiKey}` }
  t.equal((await answerOf('/api/page', auth)).csp, undefined, 'a keyed route: none of the gateway’s')
  t.equal((await answerOf('/api/page?csp=1', auth)).csp, THEIRS, "a keyed route: the upstream's alone")
  t.equal((await answerOf('/api/page')).status, 401, 'a keyed route without a key')
  const open = await answerOf('/same-origin/page')
  t.equal(open.status, 200)
  t.equal(open.csp, undefined, 'same_origin_documents: true: none')
  t.equal((await answerOf('/same-origin/page?csp=1')).csp, THEIRS, "same_origin_documents: the upstream's alone")
})

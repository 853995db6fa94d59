// A public route's page in a real browser, on the portal's origin (docs/api.md, "What comes back";
// docs/decisions/0072-a-public-routes-answers-are-sandboxed.md): with a portal session open in the
// same browser, the page an upstream serves on a public route calls /portal/api with the visitor's
// cookie, as the attacker's did, and gets nothing (its origin is opaque: the call is cross-site,
// the cookie stays home) and mints no key; while the same page on a route with
// `same_origin_documents: true` still runs same-origin, which is what that option means. A service
// worker asked for from either page is not registered.
import t from 'tap'
import type { Page } from 'playwright-core'
import { launchBrowser } from '../helpers/browser.js'
import { managementAs, startGateway } from '../helpers/gateway.js'
import type { JsonBody } from '../helpers/json.js'
import { startUpstream } from '../helpers/upstream.js'

/** The attacker's page: reads the session, mints a key, tries a worker for `/`; the outcome in its title. */
const EVIL = `<!doctype html><title>loading</title><script>
(async () => {
  const out = {}
  try {
    const s = await fetch('/portal/api/session')
    out.session = s.status
    const k = await fetch('/portal/api/keys', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'stolen-by-upstream', scopes: ['orders:read'] }) })
    out.mint = k.status
    out.secret = (await k.json().catch(() => ({}))).client_secret ?? null
  } catch (e) { out.error = String(e) }
  try {
    const base = location.pathname.split('/').slice(0, 2).join('/')
    const r = await navigator.serviceWorker.register(base + '/sw.js', { scope: '/' })
    out.worker = r.scope
  } catch (e) { out.worker = 'refused: ' + e.name }
  document.title = 'DONE ' + JSON.stringify(out)
})()
</script>`

const upstream = await startUpstream(t, (request, response) => {
  if (request.url!.endsWith('/sw.js')) {
    response.writeHead(200, { 'content-type': 'text/javascript', 'service-worker-allowed': '/' })
    response.end("self.addEventListener('fetch', () => {})")
    return
  }
  response.writeHead(200, { 'content-type': 'text/html' })
  response.end(EVIL)
})
const gateway = await startGateway(t, {
  gatewayConfig: {
    routes: [
      { prefix: '/public', upstream: upstream.url, public: true },
      { prefix: '/trusted', upstream: upstream.url, public: true, same_origin_documents: true },
    ],
  },
})
const parent = await gateway.createParent({ name: 'Provider' })

const manage = managementAs(gateway, parent.apiKey)

const sub = (await manage('POST', '', { name: 'Victim' })).id as string
const stolenKeys = async () =>
  ((await manage('GET', `/${sub}/api-keys?limit=100`)).data as JsonBody[]).filter(
    (k) => k.name === 'stolen-by-upstream',
  ).length

const browser = await launchBrowser(t)
const context = await browser.newContext()
t.teardown(() => context.close())

// The victim opens their portal link: the session cookie is set for /portal/.
const made = await manage('POST', `/${sub}/portal-sessions`, { permissions: ['keys:read', 'keys:write'] })
const link = new URL(made.url as string)
const portal = await context.newPage()
portal.setDefaultTimeout(10_000)
await portal.goto(`${gateway.url}${link.pathname}${link.search}${link.hash}`)
await portal.getByTestId('portal-account').waitFor()

/** The outcome the page wrote into its title, once it wrote it. */
async function outcomeOf(path: string): Promise<{ page: Page; out: JsonBody }> {
  const page = await context.newPage()
  page.setDefaultTimeout(10_000)
  await page.goto(`${gateway.url}${path}`)
  await page.waitForFunction(() => document.title.startsWith('DONE '))
  return { page, out: JSON.parse((await page.title()).slice(5)) }
}

t.test('the session cookie is there for the portal page', async (t) => {
  const cookies = await context.cookies()
  t.ok(
    cookies.some((c) => c.name === 'tgw_portal'),
    'tgw_portal is set',
  )
})

t.test("a public route's page cannot use the portal's session, nor register a worker", async (t) => {
  const { page, out } = await outcomeOf('/public/evil.html')
  t.equal(await page.evaluate(() => origin), 'null', 'the page runs in an opaque origin')
  t.not(out.session, 200, `GET /portal/api/session answered ${out.session ?? out.error}`)
  t.not(out.mint, 201, `POST /portal/api/keys answered ${out.mint ?? out.error}`)
  t.equal(out.secret ?? null, null, 'no client secret read')
  t.match(out.worker, /^refused: /, `no worker registered (${out.worker})`)
  t.equal(await stolenKeys(), 0, 'no key minted in the victim sub-account')
  await page.close()
})

t.test('the same page on a route with same_origin_documents: true runs same-origin', async (t) => {
  const { page, out } = await outcomeOf('/trusted/evil.html')
  t.equal(await page.evaluate(() => origin), gateway.url, "the gateway's origin: what the option gives")
  t.equal(out.session, 200, 'the portal session answers it: the reason the sandbox is the default')
  t.match(out.worker, /^refused: /, `still no worker: its script is refused at the gateway (${out.worker})`)
  t.equal(
    await page.evaluate(async () => (await navigator.serviceWorker.getRegistrations()).length),
    0,
    'none registered',
  )
  await page.close()
})

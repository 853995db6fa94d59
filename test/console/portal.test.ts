// The sub-account portal's page in a real browser (docs/portal.md), against a gateway with the real
// Postgres and Redis and an upstream: a parent makes a session through the API and its link is
// opened in a fresh browser context; the token leaves the address bar; a key is minted, rolled and
// revoked within the key policy, a mint outside it refused with the reason beside the field; usage
// and requests of that sub-account only; the link used twice; a session ended mid-use; screens
// hidden without their permission; embedding by an allowed origin, no session for another; axe, the
// policy and 390 px, with screenshots in test-artifacts/portal/.
import t from 'tap'
import type { BrowserContext, Page } from 'playwright-core'
import { type AxeFinding, axeFindings, launchBrowser, PORTAL_ARTIFACTS, screenshots } from '../helpers/browser.js'
import { runCliHere } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { managementAs, startGateway } from '../helpers/gateway.js'
import type { JsonBody } from '../helpers/json.js'
import { eventually } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

const ALL = ['keys:read', 'keys:write', 'usage:read', 'requests:read']
const RETURN_URL = 'https://provider.example/account'

// Each answer but a 404 reports 10 tokens (docs/api.md, Units).
const upstream = await startUpstream(t, (request, response) => {
  const missing = request.url?.includes('missing')
  response.writeHead(missing ? 404 : 200, {
    'content-type': 'application/json',
    ...(missing ? {} : { 'x-tokens-used': '10' }),
  })
  response.end('{}')
})
const gateway = await startGateway(t, {
  gatewayConfig: {
    routes: [
      {
        prefix: '/api',
        upstream: upstream.url,
        scopes: { read: ['orders:read'], write: ['orders:write'] },
        cost: 2,
        meters: [{ name: 'tokens', header: 'X-Tokens-Used' }],
      },
    ],
  },
  usageFlushIntervalMs: 100,
  requestLog: { flushIntervalMs: 100 },
})
const parent = await gateway.createParent({ name: 'Provider' })

const manage = managementAs(gateway, parent.apiKey)

async function subAccountWithKey(name: string, keyPolicy?: JsonBody): Promise<{ id: string; apiKey: string }> {
  const { id } = await manage('POST', '', { name, ...(keyPolicy === undefined ? {} : { key_policy: keyPolicy }) })
  const key = await manage('POST', `/${id}/api-keys`, { name: `${name} app`, scopes: ['orders:read'] })
  return { id, apiKey: key.api_key }
}

// Acme's people use the portal; Other is another customer of the same provider, never shown to them.
const acme = await subAccountWithKey('Acme', { allowed_scopes: ['orders:read'] })
const other = await subAccountWithKey('Other')

/** A session's link, on the gateway the test reaches (the API names ISSUER_URL's origin). */
async function portalLink(permissions = ALL, returnUrl: string | null = RETURN_URL, sub = acme.id) {
  const made = await manage('POST', `/${sub}/portal-sessions`, {
    permissions,
    ...(returnUrl === null ? {} : { return_url: returnUrl }),
  })
  const url = new URL(made.url as string)
  return { id: made.id as string, url: `${gateway.url}${url.pathname}${url.search}${url.hash}` }
}

async function send(apiKey: string, path: string): Promise<number> {
  const response = await fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${apiKey}` } })
  await response.arrayBuffer()
  return response.status
}

/** Polls `check` for up to 10 s; fails the test with `what` if it never holds. */
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  if ((await eventually(10_000, check, 100)) === null) throw new Error(`never: ${what}`)
}

// Acme's traffic (a 200 and an upstream 404) and Other's, in the log before the portal opens.
const sent = [
  await send(acme.apiKey, '/api/orders/1'),
  await send(acme.apiKey, '/api/missing'),
  ...[await send(other.apiKey, '/api/others-order'), await send(other.apiKey, '/api/others-order')],
  await send(other.apiKey, '/api/others-order'),
]
if (sent.join() !== '200,404,200,200,200') throw new Error(`the setup's requests answered ${sent.join()}`)
await until(async () => {
  const log = await manage('GET', '/requests?limit=100')
  return log.data.filter((r: JsonBody) => r.path.startsWith('/api/')).length === 5
}, 'the five proxied requests in the log')

const browser = await launchBrowser(t)
const violations: string[] = []
const portalCalls: string[] = []

/** A fresh browser context (no cookie, nothing stored) and a page in it, watched. */
async function freshPage(): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(10_000)
  page.on('console', (message) => {
    if (/Content.Security.Policy|Refused to|TrustedHTML/i.test(message.text())) violations.push(message.text())
  })
  page.on('pageerror', (err) => violations.push(`page error: ${err.message}`))
  page.on('request', (request) => {
    const url = new URL(request.url())
    if (url.pathname.startsWith('/portal/api/')) portalCalls.push(`${request.method()} ${url.pathname}`)
  })
  return { context, page }
}

const findings: AxeFinding[] = []
const overflow: Record<string, number> = {}
/** axe at 1280 and at 390 px (a table that scrolls sideways there must take focus), and the screenshots. */
async function screen(page: Page, name: string) {
  findings.push(...(await axeFindings(page, name)))
  overflow[name] = (await screenshots(page, name, PORTAL_ARTIFACTS)).overflowAt390
}

const { context, page } = await freshPage()
const link = await portalLink()

t.test('the link opens the portal; the token leaves the address bar at once', async (t) => {
  await page.goto(link.url)
  await page.getByRole('heading', { name: 'API keys', level: 1 }).waitFor()
  t.equal(page.url(), `${gateway.url}/portal/`, 'no fragment left')
  await page.getByTestId('keys').waitFor()
  t.notOk(await page.evaluate(() => location.hash.includes('tgwpl_')), 'nor in the document')
  t.equal(await page.getByTestId('portal-account').innerText(), 'Acme')
  const cookies = await context.cookies(`${gateway.url}/portal/`)
  t.match(cookies, [{ name: 'tgw_portal', httpOnly: true, sameSite: 'Strict', path: '/portal/' }], 'the cookie')
  t.same(await page.getByRole('navigation', { name: 'Sections' }).getByRole('link').allInnerTexts(), [
    'API keys',
    'Usage',
    'Credits',
    'Requests',
  ])
  t.equal(await page.getByRole('link', { name: 'Return to your provider' }).getAttribute('href'), RETURN_URL)
  t.same(
    await page.getByTestId('keys').locator('tbody tr td:first-child').allInnerTexts(),
    ['Acme app'],
    "Acme's key only",
  )
  await screen(page, 'keys')
})

t.test('a mint outside the key policy is refused, the reason beside the field', async (t) => {
  await page.getByLabel('Name').fill('writer')
  await page.getByLabel(/^Scopes/).fill('orders:write')
  await page.getByRole('button', { name: 'Mint key' }).click()
  const reason = page.getByTestId('mint-scopes-error')
  await reason.waitFor()
  t.equal(
    await reason.innerText(),
    'orders:write is not a scope your keys may have (they may have orders:read)',
    "the refused scope named, in a customer's words",
  )
  const scopes = page.getByLabel(/^Scopes/)
  t.equal(await scopes.getAttribute('aria-invalid'), 'true')
  t.match(await scopes.getAttribute('aria-describedby'), /mint-scopes-error/, 'the reason describes the field')
  // One message: the reason is at the field; the alert says where, in a line.
  t.equal(
    await page.getByTestId('mint-refused').innerText(),
    'The key was not minted: the field marked above says why.',
  )
  t.notMatch(await page.locator('.mint').innerText(), /\/body\/|validation_failed|key_policy/, 'no API paths or names')
  await screen(page, 'mint-refused')
  const keys = await manage('GET', `/${acme.id}/api-keys`)
  t.equal(keys.data.length, 1, 'nothing minted')
})

t.test('a key minted within the policy: its secrets once, then rolled and revoked, each asked first', async (t) => {
  await page.getByLabel('Name').fill('ci')
  await page.getByLabel(/^Scopes/).fill('orders:read')
  await page.getByRole('button', { name: 'Mint key' }).click()
  const dialog = page.getByTestId('dialog')
  await dialog.waitFor()
  const apiKey = await dialog.getByLabel('API key', { exact: true }).inputValue()
  t.match(apiKey, /^tgw_/, 'the key')
  t.match(await dialog.getByLabel('Client secret').inputValue(), /^tgws_/, 'the client secret')
  t.ok(await dialog.getByRole('button', { name: 'Copy api key' }).isVisible(), 'a copy button')
  t.equal(await send(apiKey, '/api/orders/2'), 200, 'the key works')
  await screen(page, 'minted')
  await dialog.getByRole('button', { name: 'Close' }).click()
  await dialog.waitFor({ state: 'detached' })
  t.equal(await page.locator('[data-secret]').count(), 0, 'the secrets are gone from the page')

  const minted = (await manage('GET', `/${acme.id}/api-keys`)).data.find((k: JsonBody) => k.name === 'ci')
  const label = `ci (${minted.prefix}…)`
  for (const control of [`Roll ${label}`, `Revoke ${label}`])
    t.equal(await page.getByRole('button', { name: control, exact: true }).count(), 1, `"${control}" names its key`)
  t.equal(await page.getByLabel(`Old key of ${label} keeps working for`).count(), 1)

  // Declined: nothing is done.
  const asked: string[] = []
  page.once('dialog', (d) => {
    asked.push(d.message())
    void d.dismiss()
  })
  await page.getByRole('button', { name: `Revoke ${label}`, exact: true }).click()
  await until(async () => asked.length === 1, 'the revoke asked')
  t.match(asked[0], new RegExp(`Revoke the key ci \\(${minted.prefix}…\\)`))
  t.equal((await manage('GET', `/${acme.id}/api-keys/${minted.id}`)).status, 'active', 'declined: still active')

  // Rolled (the old key revoked at once), asked first.
  await page.getByLabel(`Old key of ${label} keeps working for`).selectOption('0')
  page.once('dialog', (d) => {
    asked.push(d.message())
    void d.accept()
  })
  await page.getByRole('button', { name: `Roll ${label}`, exact: true }).click()
  await dialog.waitFor()
  t.match(asked[1], /^Roll the key ci/, 'the roll asked')
  const rolledKey = await dialog.getByLabel('API key', { exact: true }).inputValue()
  t.not(rolledKey, apiKey, 'a new key')
  await dialog.getByRole('button', { name: 'Close' }).click()
  await dialog.waitFor({ state: 'detached' })
  const afterRoll = (await manage('GET', `/${acme.id}/api-keys`)).data.filter((k: JsonBody) => k.name === 'ci')
  t.equal(afterRoll.length, 2)
  const rolled = afterRoll.find((k: JsonBody) => k.id !== minted.id)
  t.equal(afterRoll.find((k: JsonBody) => k.id === minted.id).status, 'revoked', 'the old one revoked')

  page.once('dialog', (d) => void d.accept())
  await page.getByRole('button', { name: `Revoke ci (${rolled.prefix}…)`, exact: true }).click()
  await until(
    async () => (await manage('GET', `/${acme.id}/api-keys/${rolled.id}`)).status === 'revoked',
    'the new key revoked',
  )
  await page.locator(`tr[data-key-id="${rolled.id}"] .badge.revoked`).waitFor()
  t.equal(await send(rolledKey, '/api/orders/3'), 401, 'the revoked key is refused')
  const events = (await manage('GET', `/events?target_id=${rolled.id}`)).data
  t.match(
    events.find((e: JsonBody) => e.type === 'api_key.revoked'),
    { actor: { type: 'portal_session', id: link.id } },
    'the event names the session',
  )
})

t.test('usage and requests of this sub-account only', async (t) => {
  // A limit in units, which the customer sees beside its use (far above what it uses here).
  await manage('PATCH', `/${acme.id}`, { limits: { meters: { tokens: { monthly_quota: { units: 1_000_000 } } } } })
  await page.getByRole('link', { name: 'Usage' }).click()
  await page.getByRole('heading', { name: 'Usage', level: 1 }).waitFor()
  // Acme's forwarded requests (orders/1, missing, orders/2) at the route's cost of 2: 6 request
  // units, what its quota counts; Other's three are not counted.
  await until(async () => {
    if ((await page.getByTestId('portal-used').innerText()) === '6') return true
    await page.getByRole('link', { name: 'API keys' }).click()
    await page.getByRole('link', { name: 'Usage' }).click()
    await page.getByTestId('portal-used').waitFor()
    return false
  }, "the usage screen shows Acme's 6 request units")
  t.ok(await page.getByTestId('portal-usage-days').isVisible(), 'by day')
  t.equal(
    await page.getByTestId('portal-units').innerText(),
    'Units this month: 6 request units · 20 tokens.',
    'its units: 3 forwarded at cost 2, and the tokens its upstream reported',
  )
  t.equal(
    await page.getByTestId('portal-meter-limits').innerText(),
    'Limits in units: tokens: 1,000,000 a month.',
    'its limits in units',
  )
  await screen(page, 'usage')

  await page.getByRole('link', { name: 'Requests' }).click()
  await page.getByRole('heading', { name: 'Requests', level: 1 }).waitFor()
  const rows = page.getByTestId('portal-requests').locator('tbody tr')
  await until(async () => {
    await rows.first().waitFor()
    if ((await rows.locator('td.path').allInnerTexts()).includes('/api/orders/3')) return true
    await page.getByRole('button', { name: 'Show the newest' }).click()
    await page.waitForTimeout(200)
    return false
  }, 'the revoked key refused, listed')
  const tenants = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-tenant')))
  t.ok(tenants.length >= 4, 'its requests')
  t.same([...new Set(tenants)], [acme.id], "Acme's only")
  const paths = await rows.locator('td.path').allInnerTexts()
  t.notOk(paths.includes('/api/others-order'), "none of Other's")
  t.equal(paths.indexOf('/api/orders/3') < paths.indexOf('/api/orders/1'), true, 'newest first')
  t.ok(await page.getByRole('navigation', { name: 'Requests pages' }).isVisible(), 'paged')
  await screen(page, 'requests')
})

t.test('the link used twice: the second is refused with the message, and calls no more', async (t) => {
  const { page: second } = await freshPage()
  const before = portalCalls.length
  await second.goto(link.url)
  await second.getByTestId('ended').waitFor()
  t.equal(await second.getByRole('heading', { level: 1 }).innerText(), 'This portal link cannot be used')
  t.match(await second.getByRole('alert').innerText(), /already been used[\s\S]*Ask your provider for a new link/)
  t.equal(second.url(), `${gateway.url}/portal/`, 'the token left the address bar')
  await second.waitForTimeout(300)
  t.same(portalCalls.slice(before), ['POST /portal/api/session'], 'the exchange, and nothing after')
  await screen(second, 'link-used')
})

t.test('a session ended by its provider mid-use shows the ended message', async (t) => {
  const { page: live } = await freshPage()
  const ending = await portalLink()
  await live.goto(ending.url)
  await live.getByRole('heading', { name: 'API keys', level: 1 }).waitFor()
  // The key list read first: a read still on its way would meet the end itself, before the click.
  await live.getByTestId('keys').waitFor()
  await manage('DELETE', `/${acme.id}/portal-sessions/${ending.id}`)
  await live.getByRole('link', { name: 'Usage' }).click()
  await live.getByTestId('ended').waitFor()
  t.equal(await live.getByRole('heading', { level: 1 }).innerText(), 'Your portal session has ended')
  t.match(await live.getByRole('alert').innerText(), /ended[\s\S]*Ask your provider for a new link/)
  t.equal(await live.getByRole('link', { name: "Return to your provider's site" }).getAttribute('href'), RETURN_URL)
  const before = portalCalls.length
  await live.evaluate(() => {
    location.hash = '#/requests'
  })
  await live.waitForTimeout(300)
  t.equal(portalCalls.length, before, 'no call after the end')
  await screen(live, 'ended')
})

t.test('a reload keeps a cookie session; its expiry ends it without a call', async (t) => {
  const { page: timed } = await freshPage()
  await timed.clock.install()
  await timed.goto((await portalLink(['usage:read', 'requests:read'])).url)
  await timed.getByRole('heading', { name: 'Usage', level: 1 }).waitFor()
  await timed.getByRole('link', { name: 'Requests' }).click()
  await timed.getByRole('heading', { name: 'Requests', level: 1 }).waitFor()
  await timed.reload()
  await timed.getByRole('navigation', { name: 'Requests pages' }).waitFor() // the list read
  t.pass('reloaded: the cookie session, on the screen the address names')
  const before = portalCalls.length
  await timed.clock.fastForward(901_000)
  await timed.getByTestId('ended').waitFor()
  t.match(await timed.getByRole('alert').innerText(), /expired[\s\S]*Ask your provider for a new link/)
  t.equal(portalCalls.length, before, 'said without asking the API')
})

t.test('an exchange the gateway could not answer: the link is kept, and tried again', async (t) => {
  const { page: unlucky } = await freshPage()
  let refused = 0
  await unlucky.route('**/portal/api/session', async (route) => {
    if (route.request().method() !== 'POST' || refused > 0) return route.continue()
    refused++
    return route.fulfill({
      status: 503,
      contentType: 'application/problem+json',
      body: JSON.stringify({
        status: 503,
        code: 'store_unavailable',
        title: 'Service Unavailable',
        detail: 'the store',
      }),
    })
  })
  await unlucky.goto((await portalLink(['usage:read'])).url)
  await unlucky.getByTestId('open-failed').waitFor()
  t.match(await unlucky.getByRole('alert').innerText(), /503 store_unavailable[\s\S]*try again in a moment/)
  t.notOk(unlucky.url().includes('#'), 'the token left the address bar all the same')
  await screen(unlucky, 'open-failed')
  await unlucky.getByRole('button', { name: 'Try again' }).click()
  await unlucky.getByRole('heading', { name: 'Usage', level: 1 }).waitFor()
  t.pass('opened on the second try, with the token kept in memory')
})

t.test('a screen without its permission is not shown', async (t) => {
  const { page: narrow } = await freshPage()
  await narrow.goto((await portalLink(['requests:read'], null)).url)
  await narrow.getByRole('heading', { name: 'Requests', level: 1 }).waitFor()
  t.equal(await narrow.getByRole('navigation', { name: 'Sections' }).count(), 0, 'one screen: no navigation')
  t.equal(await narrow.getByRole('link', { name: 'Return to your provider' }).count(), 0, 'no return_url: no link')
  await narrow.evaluate(() => {
    location.hash = '#/keys'
  })
  await narrow.waitForTimeout(200)
  t.equal(await narrow.getByRole('heading', { name: 'API keys' }).count(), 0, 'no keys screen by address')
  await narrow.evaluate(() => {
    location.hash = '#/credits'
  })
  await narrow.waitForTimeout(200)
  t.equal(await narrow.getByRole('heading', { name: 'Credits' }).count(), 0, 'no credits screen without usage:read')

  const { page: reader } = await freshPage()
  await reader.goto((await portalLink(['keys:read', 'requests:read'])).url)
  await reader.getByTestId('keys').waitFor()
  t.equal(await reader.getByRole('button', { name: 'Mint key' }).count(), 0, 'keys:read: no mint form')
  t.equal(await reader.getByRole('button', { name: /^(Roll|Revoke)/ }).count(), 0, 'nor roll or revoke')
  t.same(await reader.getByRole('navigation', { name: 'Sections' }).getByRole('link').allInnerTexts(), [
    'API keys',
    'Requests',
  ])
  await screen(reader, 'read-only')
})

t.test('embedding: framed by an allowed origin; another gets no session', async (t) => {
  const env = { DATABASE_URL: gateway.database.url, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY }
  const set = await runCliHere(
    ['accounts', 'portal-origins', '--account', parent.id, '--origins', 'https://provider.example'],
    env,
  )
  t.equal(set.code, 0, set.stderr)
  // The frame sends no Referer (https to the plain-http gateway): nothing depends on one. The page
  // names its ancestors (location.ancestorOrigins) at the exchange, which the link's parent must list.
  const embedder = (frameUrl: string) => `<!doctype html><html lang="en"><head><title>Provider</title></head>
<body><main><h1>Your account</h1><iframe title="Account portal" src="${frameUrl}" width="1000" height="700"></iframe></main></body></html>`

  // The gateway listens on loopback: a public page may frame it only with the browser's leave
  // (Local Network Access), which a provider's real page, on the gateway's public origin, never needs.
  const { context: framing, page: host } = await freshPage()
  await framing.grantPermissions(['local-network-access'], { origin: 'https://provider.example' })
  const framed = await portalLink()
  await host.route('https://provider.example/**', (route) =>
    route.fulfill({ status: 200, contentType: 'text/html', body: embedder(framed.url) }),
  )
  const exchanges: string[] = []
  const bearers: string[] = []
  host.on('request', (request) => {
    if (request.url().endsWith('/portal/api/session') && request.method() === 'POST')
      exchanges.push(request.postData() ?? '')
    else if (request.url().includes('/portal/api/')) bearers.push(request.headers().authorization ?? '')
  })
  await host.goto('https://provider.example/account')
  const frame = host.frameLocator('iframe[title="Account portal"]')
  await frame.getByRole('heading', { name: 'API keys', level: 1 }).waitFor()
  t.match(
    JSON.parse(exchanges[0]!),
    { embedded: true, ancestor_origins: ['https://provider.example'] },
    'exchanged as embedded, naming its ancestor',
  )
  // The heading shows before the screen's first call goes out (CI, once, under load).
  await until(async () => bearers.length > 0, "the screen's first call")
  t.ok(
    bearers.every((b) => /^Bearer tgwps_/.test(b)),
    `its calls carry the bearer (${bearers.length})`,
  )
  t.same(await framing.cookies(`${gateway.url}/portal/`), [], 'no cookie')
  await frame.getByRole('link', { name: 'Usage' }).click()
  await frame.getByTestId('portal-used').waitFor()
  t.equal(await frame.getByRole('link', { name: 'Return to your provider' }).getAttribute('target'), '_top')
  // The frame's address still holds the spent token, and the session was in the old page's memory.
  await host.reload()
  await frame.getByTestId('ended').waitFor()
  t.match(
    await frame.getByRole('alert').innerText(),
    /already been used[\s\S]*Ask your provider for a new link/,
    'reloaded: ended',
  )

  // Another site frames a link of this parent: the page shows, but the exchange refuses it a session.
  const { context: strangers, page: stranger } = await freshPage()
  await strangers.grantPermissions(['local-network-access'], { origin: 'https://stranger.example' })
  const refused = await portalLink()
  await stranger.route('https://stranger.example/**', (route) =>
    route.fulfill({ status: 200, contentType: 'text/html', body: embedder(refused.url) }),
  )
  await stranger.goto('https://stranger.example/')
  const strangerFrame = stranger.frameLocator('iframe')
  await strangerFrame.getByTestId('ended').waitFor()
  t.match(
    await strangerFrame.getByRole('alert').innerText(),
    /may not be used in a page of "https:\/\/stranger\.example"[\s\S]*Ask your provider for a new link/,
    'the page says why',
  )
  t.equal(
    await strangerFrame.getByRole('heading', { name: 'API keys' }).count(),
    0,
    'nothing of the portal in the frame',
  )
  const sessions = (await manage('GET', `/${acme.id}/portal-sessions`)).data
  t.equal(sessions.find((s: JsonBody) => s.id === refused.id).link_used, false, 'its link was not exchanged')
})

t.test("a session ended by its sub-account's deactivation mid-use shows the ended message", async (t) => {
  const gamma = await subAccountWithKey('Gamma')
  const { page: live } = await freshPage()
  const ending = await portalLink(ALL, RETURN_URL, gamma.id)
  await live.goto(ending.url)
  await live.getByRole('heading', { name: 'API keys', level: 1 }).waitFor()
  await live.getByTestId('keys').waitFor()
  await manage('POST', `/${gamma.id}/deactivate`)
  await live.getByRole('link', { name: 'Usage' }).click()
  await live.getByTestId('ended').waitFor()
  t.equal(await live.getByRole('heading', { level: 1 }).innerText(), 'Your portal session has ended')
})

t.test("the parent's console: a link made with the permissions chosen, shown once, then ended", async (t) => {
  const { page: console_ } = await freshPage()
  console_.on('dialog', (dialog) => void dialog.accept())
  await console_.goto(`${gateway.url}/console`)
  await console_.getByLabel('Parent API key').fill(parent.apiKey)
  await console_.getByRole('button', { name: 'Sign in' }).click()
  await console_.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  await console_.goto(`${gateway.url}/console#/sub-accounts/${acme.id}`)
  const form = console_.getByTestId('portal-form')
  await form.waitFor()
  await form.getByLabel("see this month's usage and its credits").uncheck()
  await form.getByLabel('Lasts').selectOption({ label: '1 hour' })
  await form.getByRole('button', { name: 'Make a portal link' }).click()
  const shown = console_.getByTestId('dialog')
  await shown.waitFor()
  const url = await shown.getByLabel('Link').inputValue()
  t.match(url, /\/portal\/#tgwpl_/, 'the link, with its one-time token')
  // The link names no session: the one made is the latest to end of those permissions not opened yet.
  const listed = (await manage('GET', `/${acme.id}/portal-sessions`)).data
    .filter((s: JsonBody) => !s.link_used && s.permissions.join() === 'keys:read,requests:read')
    .sort((a: JsonBody, b: JsonBody) => Date.parse(a.expires_at) - Date.parse(b.expires_at))
    .at(-1)
  const id: string = listed.id
  t.same(listed.permissions, ['keys:read', 'requests:read'], 'the permissions chosen')
  t.ok(Math.abs(Date.parse(listed.expires_at) - Date.now() - 3_600_000) < 120_000, 'for an hour')
  await shown.getByRole('button', { name: 'Close' }).click()
  await until(async () => (await console_.locator('#portal-link').count()) === 0, 'the link gone once closed')
  t.pass('the link is gone from the page once its dialog is closed')

  const row = console_.getByTestId('portal-sessions').locator(`tr[data-session-id="${id}"]`)
  t.match(await row.innerText(), /keys:read requests:read[\s\S]*not opened yet/)
  await screen(console_, 'console-portal-links')
  await row.getByRole('button', { name: `End session ${id.slice(0, 8)}…` }).click()
  await console_.getByTestId('portal-confirmation').waitFor()
  await until(async () => (await row.count()) === 0, 'the ended session leaves the list')
  const open = (await manage('GET', `/${acme.id}/portal-sessions`)).data.map((s: JsonBody) => s.id)
  t.notOk(open.includes(id), 'ended through the API')
  const { page: late } = await freshPage()
  await late.goto(`${gateway.url}${new URL(url).pathname}${new URL(url).search}${new URL(url).hash}`)
  await late.getByTestId('ended').waitFor()
  t.pass('its link no longer opens the portal')
})

t.test('no policy violation, no axe finding, nothing wider than 390 px', async (t) => {
  t.same(violations, [], 'no Content-Security-Policy violation, no page error')
  t.same(findings, [], 'axe finds nothing')
  t.same(
    Object.entries(overflow).filter(([, px]) => px > 0),
    [],
    'no screen scrolls sideways at 390 px',
  )
})

// What a parent's customer meets in the portal (docs/portal.md), in Debian's Chromium against a
// gateway with the real Postgres and an upstream: a session that may mint is given the sub-account's key
// policy, and the mint form offers only the lifetimes and scopes it allows; a session that may not
// mint is not given it; with nothing to offer, the form does not say "press the scopes offered"; a
// refusal is said in a customer's words, once; the client secret, the roll and the usage are
// explained, times are in one format, and an ended session's page has its header; the request log
// filters by status and key and opens a record's details (the console's RequestTable).
import type { Page } from 'playwright-core'
import t from 'tap'
import { axeFindings, launchBrowser } from '../helpers/browser.js'
import { managementAs, startGateway } from '../helpers/gateway.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t, (request, response) => {
  response.writeHead(request.url?.includes('missing') ? 404 : 200, { 'content-type': 'application/json' })
  response.end('{}')
})
const gateway = await startGateway(t, {
  redis: false,
  gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url, scopes: { read: ['orders:read'], write: [] } }] },
})
const parent = await gateway.createParent({ name: 'Provider' })
const manage = managementAs(gateway, parent.apiKey)
const policy = { allowed_scopes: ['orders:*', 'tracking:read'], max_ttl_seconds: 30 * 86_400, ip_allowlist: null }
const bounded = (await manage('POST', '', { name: 'Bounded', key_policy: policy })).id as string
const free = (await manage('POST', '', { name: 'Free' })).id as string
const link = async (sub: string, permissions: string[]) => {
  const made = await manage('POST', `/${sub}/portal-sessions`, { permissions })
  const url = new URL(made.url as string)
  return `${gateway.url}${url.pathname}${url.search}${url.hash}`
}

const browser = await launchBrowser(t)
const open = async (url: string): Promise<Page> => {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage()
  page.setDefaultTimeout(15_000)
  await page.goto(url)
  await page.getByTestId('portal-account').waitFor()
  return page
}
const sessionOf = (page: Page) =>
  page.evaluate(async () => (await fetch('/portal/api/session', { credentials: 'same-origin' })).json())

t.test('a session that may mint is given the key policy, and the form offers only what it allows', async (t) => {
  const page = await open(await link(bounded, ['keys:read', 'keys:write']))
  t.same((await sessionOf(page)).key_policy, policy, 'the session carries the policy')
  const presets = await page.locator('#mint-expires ~ .presets button').allInnerTexts()
  t.same(presets, ['In 7 days', 'In 30 days'], 'no lifetime longer than 30 days, and no "No expiry"')
  t.match(await page.getByTestId('mint-expires-help').innerText(), /at most 30 days/)
  const offered = await page.getByTestId('scope-picker').getByRole('button').allInnerTexts()
  t.same(offered, ['orders:*', 'tracking:read'], "the policy's scopes offered")
  t.equal(await page.locator('#mint-scopes').getAttribute('placeholder'), 'orders:* tracking:read')
  t.match(await page.locator('#mint-scopes-typed').innerText(), /^Press the scopes offered below/)
  // An expiry past the policy, typed: refused in words, one line in the alert.
  await page.getByLabel('Name').fill('too long')
  await page.getByLabel(/^Scopes/).fill('orders:read')
  await page.locator('#mint-expires').fill('2035-01-01T12:00')
  await page.getByRole('button', { name: 'Mint key' }).click()
  await page.getByTestId('mint-expires-error').waitFor()
  t.match(
    await page.getByTestId('mint-expires-error').innerText(),
    /^Your keys may live at most 30 days: choose an expiry before \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\.$/,
  )
  t.equal(
    await page.getByTestId('mint-refused').innerText(),
    'The key was not minted: the field marked above says why.',
  )
  t.same(await axeFindings(page, 'portal-customer'), [], 'axe finds nothing')
})

t.test('no policy to show: every lifetime, and no scope offered that is not there', async (t) => {
  const page = await open(await link(free, ['keys:read', 'keys:write']))
  t.same((await sessionOf(page)).key_policy, { allowed_scopes: null, max_ttl_seconds: null, ip_allowlist: null })
  const presets = await page.locator('#mint-expires ~ .presets button').allInnerTexts()
  t.same(presets, ['In 7 days', 'In 30 days', 'In 90 days', 'In a year', 'No expiry'])
  t.equal(await page.getByTestId('scope-picker').count(), 0, 'nothing offered')
  t.equal(await page.locator('#mint-scopes').getAttribute('placeholder'), null, 'no made-up example')
  t.match(await page.locator('#mint-scopes-typed').innerText(), /^Type the scopes the key needs/)
})

t.test('a session that may not mint is not given the key policy', async (t) => {
  const page = await open(await link(bounded, ['keys:read', 'usage:read']))
  const session = await sessionOf(page)
  t.same(session.permissions, ['keys:read', 'usage:read'])
  t.notOk('key_policy' in session, 'no key_policy')
})

t.test('a minted key: the client secret explained, the roll said in words, times in one format', async (t) => {
  const page = await open(await link(free, ['keys:read', 'keys:write', 'usage:read']))
  t.match(
    await page.locator('.session-end').innerText(),
    /^This session ends at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\.$/,
    'the session end in the tables’ format',
  )
  await page.getByLabel('Name').fill('app')
  await page.getByLabel(/^Scopes/).fill('orders:read')
  await page.getByRole('button', { name: 'Mint key' }).click()
  const dialog = page.getByTestId('dialog')
  await dialog.waitFor()
  t.match(await dialog.getByTestId('client-secret-help').innerText(), /short-lived access tokens/)
  await dialog.getByRole('button', { name: 'Close' }).click()
  const overlap = page.locator('.overlap-label [aria-hidden="true"]').first()
  await overlap.waitFor()
  t.equal(await overlap.innerText(), 'Old key works for', 'the roll control says what it picks')
  await page.getByRole('link', { name: 'Usage' }).click()
  await page.getByTestId('portal-counted').waitFor()
  t.match(await page.getByTestId('portal-counted').innerText(), /each at its route's cost/)
})

t.test('an ended session: the page has its header, and says to ask for a new link once', async (t) => {
  const url = await link(free, ['usage:read'])
  const page = await open(url)
  const sessions = await manage('GET', `/${free}/portal-sessions`)
  for (const session of sessions.data as { id: string }[])
    await gateway.call(parent.apiKey, {
      method: 'DELETE',
      url: `/v1/sub-accounts/${free}/portal-sessions/${session.id}`,
      acting: 'self',
    })
  await page.reload()
  const ended = page.getByTestId('ended')
  await ended.waitFor()
  t.equal(await page.locator('header.top .brand').innerText(), 'Account portal')
  const text = await ended.innerText()
  t.equal(text.match(/ask your provider for a new/gi)?.length, 1, `said once: ${text}`)
  t.same(await axeFindings(page, 'portal-ended'), [], 'axe finds nothing')
})

t.test("the request log: filtered by status and key, a record's details, the key by its name", async (t) => {
  const sub = (await manage('POST', '', { name: 'Logged' })).id as string
  const key = await manage('POST', `/${sub}/api-keys`, { name: 'shop', scopes: ['orders:read'] })
  for (const path of ['/api/orders', '/api/missing', '/api/orders'])
    await fetch(`${gateway.url}${path}`, { headers: { authorization: `Bearer ${key.api_key}` } })
  await gateway.app.requestLog!.flush()
  const page = await open(await link(sub, ['keys:read', 'requests:read']))
  await page.getByRole('link', { name: 'Requests' }).click()
  const rows = page.getByTestId('portal-requests').locator('tbody tr')
  await rows.nth(2).waitFor()
  const keyCells = await rows.locator('td[data-label="Key"]').allInnerTexts()
  t.same([...new Set(keyCells)], [`shop (${key.prefix}…)`], 'the key by its name and prefix, not its id')
  await page.getByLabel('Status (404, or 4xx)').fill('404')
  await page.getByRole('button', { name: 'Filter', exact: true }).click()
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=portal-requests] tbody tr').length === 1)
  t.same(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-status'))), ['404'], 'the 404 only')
  await page.getByLabel('Key').selectOption({ label: `shop (${key.prefix}…)` })
  await page.getByRole('button', { name: 'Filter', exact: true }).click()
  await rows.first().getByRole('button').click()
  const details = page.getByTestId('request-details')
  await details.waitFor()
  const text = await details.innerText()
  t.match(text, /Path\s+\/api\/missing/)
  t.match(text, new RegExp(`Key\\s+shop \\(${key.prefix}…\\)`), 'the details name the key')
  t.same(await axeFindings(page, 'portal-request-details'), [], 'axe finds nothing')
  await page.keyboard.press('Escape')
  await page.getByRole('button', { name: 'Clear the filters' }).click()
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=portal-requests] tbody tr').length === 3)
  t.pass('cleared: all three again')
})

// The console's sub-accounts list ordered by the API (a header pressed, aria-sort, the order held
// across pages), its Keys and This month columns, and usage as the screens open: the whole
// account's requests by sub-account, a sub-account's by key, and its month against its limits.
// In Debian's Chromium against a gateway with the real Postgres and a real upstream; axe in both
// themes, screenshots at 1280 and 390 pixels (test-artifacts/console/).
import t from 'tap'
import type { Page, Request } from 'playwright-core'
import { axeFindings, launchBrowser, screenshots } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

// Each answer but the 404 reports 100 tokens, on a route that reads them (docs/api.md, Units).
const upstream = await startUpstream(t, (request, response) => {
  const missing = request.url === '/v1/missing'
  response.writeHead(missing ? 404 : 200, {
    'content-type': 'application/json',
    ...(missing ? {} : { 'x-tokens-used': '100' }),
  })
  response.end('{}')
})
const gateway = await startGateway(t, {
  upstreamUrl: upstream.url,
  redis: false,
  usageFlushIntervalMs: 3_600_000,
  gatewayConfig: {
    routes: [{ prefix: '/v1', upstream: upstream.url, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] }],
  },
})
const parent = await gateway.createParent({ name: 'Breakdown parent' })

async function manage(method: string, url: string, body?: unknown): Promise<Record<string, unknown>> {
  const res = await gateway.call(parent.apiKey, { method: method as 'GET', url, acting: 'self', body })
  if (res.statusCode >= 300) throw new Error(`setup ${method} ${url}: ${res.statusCode} ${res.body}`)
  return res.json()
}

// 22 sub-accounts, made in an order that is not their names' ("sub 21" first): a page of 20
// sorted by the browser alone would show other names than the API's sort.
const subs: { id: string; name: string }[] = []
for (let i = 22; i >= 1; i--) {
  const name = `sub ${String(i).padStart(2, '0')}`
  subs.push({ id: (await manage('POST', '/v1/sub-accounts', { name })).id as string, name })
}
const acme = (await manage('POST', '/v1/sub-accounts', { name: 'Acme (the busy one)' })) as { id: string }
const ci = (await manage('POST', `/v1/sub-accounts/${acme.id}/api-keys`, { name: 'ci', scopes: ['x:read'] })) as {
  id: string
  api_key: string
  prefix: string
}
const deploy = (await manage('POST', `/v1/sub-accounts/${acme.id}/api-keys`, {
  name: 'deploy',
  scopes: ['x:read'],
})) as { api_key: string }
// The newest of them: on the first page newest first, where the list test leaves the list.
const quiet = subs[subs.length - 1]!
const quietKey = (await manage('POST', `/v1/sub-accounts/${quiet.id}/api-keys`, {
  name: 'q',
  scopes: ['x:read'],
})) as { api_key: string }

async function send(key: string, path: string, acting?: string): Promise<void> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` }
  if (acting !== undefined) headers['x-service-acting-tenant'] = acting
  const res = await fetch(`${gateway.url}${path}`, { headers })
  await res.arrayBuffer()
}
// Acme: ci 6 (one 404), deploy 3, the parent acting as it 1: 10, of which 10 forwarded. Quiet: 2.
for (let i = 0; i < 5; i++) await send(ci.api_key, '/v1/ok')
await send(ci.api_key, '/v1/missing')
for (let i = 0; i < 3; i++) await send(deploy.api_key, '/v1/ok')
await send(parent.apiKey, '/v1/ok', acme.id)
for (let i = 0; i < 2; i++) await send(quietKey.api_key, '/v1/ok')
await gateway.app.usageMeter.flush()
// Its limits once the traffic is in: the screens show use against them, not the limiter at work.
await manage('PATCH', `/v1/sub-accounts/${acme.id}`, {
  limits: { rate: { requests: 500, per_seconds: 60 }, monthly_quota: { requests: 40 } },
})

const browser = await launchBrowser(t)
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
const page: Page = await context.newPage()
page.setDefaultTimeout(10_000)
const errors: string[] = []
page.on('pageerror', (err) => errors.push(err.message))
const api: URL[] = []
page.on('request', (request: Request) => {
  const url = new URL(request.url())
  if (url.pathname.startsWith('/v1/')) api.push(url)
})
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  if ((await eventually(10_000, check, 100)) === null) throw new Error(`never: ${what}`)
}
const findings: string[] = []
async function screen(name: string): Promise<void> {
  for (const scheme of ['light', 'dark'] as const) {
    await page.emulateMedia({ colorScheme: scheme })
    const found = await axeFindings(page, name)
    findings.push(...found.map((f) => `${name} (${scheme}): ${f.id} ${f.help}`))
    const shot = await screenshots(page, scheme === 'light' ? name : `${name}-dark`)
    if (shot.overflowAt390 > 0) findings.push(`${name} (${scheme}): scrolls sideways at 390 px: ${shot.widest}`)
  }
  await page.emulateMedia({ colorScheme: 'light' })
}

const table = () => page.getByTestId('subaccounts')
const names = () => table().locator('tbody tr td:first-child').allInnerTexts()
const sortedNames = [...subs.map((s) => s.name), 'Acme (the busy one)'].sort((a, b) =>
  a.toLowerCase() < b.toLowerCase() ? -1 : 1,
)

await page.goto(`${gateway.url}/console`)
await page.getByLabel('Parent API key').fill(parent.apiKey)
await page.getByRole('button', { name: 'Sign in' }).click()
await table().waitFor()

t.test('the list: a header pressed sorts by the API, across pages, said by aria-sort', async (t) => {
  const nameHeader = table().locator('th', { has: page.getByTestId('sort-name') })
  const createdHeader = table().locator('th', { has: page.getByTestId('sort-created_at') })
  t.equal(await createdHeader.getAttribute('aria-sort'), 'ascending', 'oldest first at the start')
  t.equal(await nameHeader.getAttribute('aria-sort'), null)
  t.equal((await names())[0], 'sub 22', 'as made')

  let before = api.length
  await page.getByTestId('sort-name').click()
  await until(async () => (await names())[0] === sortedNames[0], 'sorted by name')
  t.same(await names(), sortedNames.slice(0, 20), 'the first 20 names of all 23, not of the first page')
  t.equal(await nameHeader.getAttribute('aria-sort'), 'ascending')
  t.equal(await createdHeader.getAttribute('aria-sort'), null)
  t.equal(
    api
      .slice(before)
      .find((u) => u.pathname === '/v1/sub-accounts')
      ?.searchParams.get('sort'),
    'name',
  )
  t.equal(await page.getByLabel('Order').inputValue(), 'name', 'the Order field follows the header')

  await page.getByRole('button', { name: 'Next page' }).click()
  await until(async () => (await names()).length === 3, 'the second page')
  t.same(await names(), sortedNames.slice(20), 'page 2 goes on in the same order')

  before = api.length
  await page.getByTestId('sort-name').click()
  await until(async () => (await names())[0] === sortedNames.at(-1), 'Z to A')
  t.equal(await nameHeader.getAttribute('aria-sort'), 'descending', 'pressed again: descending')
  const call = api.slice(before).find((u) => u.pathname === '/v1/sub-accounts')
  t.equal(call?.searchParams.get('sort'), '-name')
  t.equal(call?.searchParams.get('cursor'), null, 'a new order starts at its first page (a cursor pages one order)')

  await page.getByTestId('sort-created_at').click()
  await until(async () => (await names())[0] === 'sub 22', 'oldest first again')
  await page.getByTestId('sort-created_at').click()
  await until(async () => (await names())[0] === 'Acme (the busy one)', 'newest first')
  t.equal(await createdHeader.getAttribute('aria-sort'), 'descending')
})

t.test("the list's Keys and This month columns", async (t) => {
  const row = table().locator('tbody tr', { hasText: 'Acme (the busy one)' })
  t.equal(await row.locator('td[data-label="Keys"]').innerText(), '2', 'its two active keys')
  t.equal(
    await row.locator('td[data-label="This month"]').innerText(),
    '10 (25% of quota)',
    'its forwarded requests, and their share of its quota',
  )
  const quietRow = table().locator('tbody tr', { hasText: quiet.name })
  t.equal(await quietRow.locator('td[data-label="This month"]').innerText(), '2', 'no quota: the count alone')
  const listCall = api.filter((u) => u.pathname === '/v1/sub-accounts').at(-1)
  t.equal(listCall?.searchParams.get('include'), 'key_count,usage_this_month', 'asked of the API, a page at a time')
  await screen('subaccounts-sorted')
})

t.test("the account's usage by sub-account, read as the screen opens", async (t) => {
  const before = api.length
  await page.getByRole('link', { name: 'Usage' }).click()
  const bySub = page.getByTestId('usage-by-sub-account')
  await bySub.waitFor()
  const rows = await bySub
    .locator('tbody tr')
    .evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent?.trim())))
  t.same(
    rows,
    [
      ['Acme (the busy one)', '10', '1', '0', '0', '10 request units · 900 tokens', '83%'],
      [quiet.name, '2', '0', '0', '0', '2 request units · 200 tokens', '17%'],
    ],
    'most requests first, with the name, the classes, the units and the share',
  )
  t.equal(
    await bySub.getByRole('link', { name: 'Acme (the busy one)' }).getAttribute('href'),
    `#/sub-accounts/${acme.id}`,
  )
  const usageCalls = api.slice(before).filter((u) => u.pathname === '/v1/sub-accounts/usage')
  t.equal(usageCalls.length, 1, 'the chart and the breakdown from one call')
  t.equal(usageCalls[0]?.searchParams.get('include'), 'name')
  t.match(await page.getByTestId('account-rate').innerText(), /No account rate limit/)
  await screen('usage-by-sub-account')
})

t.test("a sub-account's usage by key and its month against its limits, without pressing anything", async (t) => {
  await page.getByTestId('usage-by-sub-account').getByRole('link', { name: 'Acme (the busy one)' }).click()
  const byKey = page.getByTestId('usage-by-key')
  await byKey.waitFor()
  const rows = await byKey
    .locator('tbody tr')
    .evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent?.trim())))
  t.same(
    rows.map((r) => [r[0]?.split(' ')[0], ...r.slice(1)]),
    [
      ['ci', 'its own', '6', '1', '0', '6 request units · 500 tokens', '60%'],
      ['deploy', 'its own', '3', '0', '0', '3 request units · 300 tokens', '30%'],
      [rows[2]?.[0]?.split(' ')[0], 'the parent, acting as it', '1', '0', '0', '1 request unit · 100 tokens', '10%'],
    ],
    'each key, most requests first, its own and the parent’s',
  )
  t.match(rows[0]?.[0], `${ci.prefix}…`, 'a key by its name and prefix')
  await page.getByTestId('sub-quota').waitFor()
  t.match(await page.getByTestId('sub-quota').innerText(), /10 of 40 request units \(25%\)/, 'the quota, exactly')
  t.equal(await page.locator('#sub-quota-meter').getAttribute('value'), '10')
  t.match(await page.getByTestId('sub-rate').innerText(), /Rate limit: 500 per minute/, 'the rate in words')
  await screen('usage-by-key')
})

t.test('at 390 px the breakdowns are cards that fit', async (t) => {
  await page.setViewportSize({ width: 390, height: 844 })
  await page.waitForTimeout(100)
  for (const id of ['usage-by-key']) {
    const outside = await page
      .getByTestId(id)
      .locator('tbody td')
      .evaluateAll((tds) => tds.filter((td) => td.getBoundingClientRect().right > 391).length)
    t.equal(outside, 0, `${id}: every cell within the window`)
  }
  await page.setViewportSize({ width: 1280, height: 800 })
})

t.test('axe: no findings on the new screens, light and dark; no page error', async (t) => {
  t.same(findings, [], 'axe and the 390 px layout')
  t.same(errors, [], 'no page error')
})

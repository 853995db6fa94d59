// The console over a parent with more sub-accounts than a browser should read (docs/console.md):
// the search asks the API (`q`) and finds a sub-account past the first 2,000, paging through its
// matches; the usage chart draws a month from one call (`granularity=day`), counted by the
// requests the page sends.
import t from 'tap'
import type { Page, Request } from 'playwright-core'
import { launchBrowser } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'

const gateway = await startGateway(t, { redis: false })
const parent = await gateway.createParent({ name: 'Many sub-accounts' })
const BULK = 2_100
await gateway.sql`
  insert into tenants (parent_id, name)
  select ${parent.id}, 'bulk ' || lpad(i::text, 4, '0') from generate_series(1, ${BULK}) as i`
const created = await gateway.call(parent.apiKey, {
  method: 'POST',
  url: '/v1/sub-accounts',
  acting: 'self',
  body: { name: 'Zebra last', external_id: 'zebra-1' },
})
if (created.statusCode !== 201) throw new Error(`setup: ${created.statusCode} ${created.body}`)
const zebra = created.json() as { id: string }

const browser = await launchBrowser(t)
const page: Page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
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
const live = () => page.getByTestId('live')
const rows = () => page.getByTestId('subaccounts').locator('tbody tr')

await page.goto(`${gateway.url}/console`)
await page.getByLabel('Parent API key').fill(parent.apiKey)
await page.getByRole('button', { name: 'Sign in' }).click()
await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
await rows().first().waitFor()

t.test('the search asks the API and finds a sub-account past the first 2,000', async (t) => {
  const before = api.length
  // Typed, not submitted: the search goes once typing pauses.
  await page.getByLabel('Name or external id').pressSequentially('zeb')
  await until(async () => (await live().innerText()).includes('1 sub-account match “zeb”'), 'the search answered')
  t.equal(await rows().count(), 1)
  t.match(await rows().first().innerText(), /Zebra last/, `the ${BULK + 1}th sub-account is found`)
  const lists = api.slice(before).filter((url) => url.pathname === '/v1/sub-accounts')
  t.ok(lists.length >= 1 && lists.length <= 3, `at most one call a key typed (${lists.length})`)
  t.ok(
    lists.every((url) => ['z', 'ze', 'zeb'].includes(url.searchParams.get('q') ?? '')),
    'every call carries q',
  )
  t.equal(lists.at(-1)?.searchParams.get('q'), 'zeb', 'the last asks for what was typed')
  t.ok(
    lists.every((url) => url.searchParams.get('limit') === '20'),
    'a page of 20: nothing read in bulk',
  )

  await page.getByLabel('Name or external id').fill('ZEBRA-')
  await until(async () => (await live().innerText()).includes('1 sub-account match “ZEBRA-”'), 'by external id')
  t.match(await rows().first().innerText(), /zebra-1/, 'by the start of its external id, any case')
})

t.test('a search with many matches pages through them', async (t) => {
  await page.getByLabel('Name or external id').fill('bulk 1')
  await until(async () => (await live().innerText()).includes('20 sub-accounts match “bulk 1”'), 'the first page')
  t.match(await rows().first().innerText(), /bulk 1000/)
  const before = api.length
  await page.getByRole('button', { name: 'Next page' }).click()
  await until(async () => (await rows().first().innerText()).includes('bulk 1020'), 'the second page')
  const next = api.slice(before).find((url) => url.pathname === '/v1/sub-accounts')
  t.equal(next?.searchParams.get('q'), 'bulk 1', 'the next page keeps q')
  t.type(next?.searchParams.get('cursor'), 'string', 'and follows the cursor')
  await page.getByRole('button', { name: 'Clear the search' }).click()
  await until(async () => (await rows().first().innerText()).includes('bulk 0001'), 'the list again')
})

t.test('the usage chart draws the month from one call', async (t) => {
  // Usage on every day of this month so far, for Zebra and two others.
  const today = new Date().toISOString().slice(0, 10)
  const days: string[] = []
  for (let d = new Date(`${today.slice(0, 8)}01T00:00:00Z`); d.toISOString().slice(0, 10) <= today; ) {
    days.push(d.toISOString().slice(0, 10))
    d.setUTCDate(d.getUTCDate() + 1)
  }
  const others = await gateway.sql<{ id: string }[]>`
    select id from tenants where parent_id = ${parent.id} and name in ('bulk 0001', 'bulk 2100') order by seq`
  const tenants = [zebra.id, ...others.map((o) => o.id)]
  for (const [i, day] of days.entries()) {
    for (const tenant of tenants) {
      await gateway.sql`insert into usage_daily (tenant_id, day, status_class, requests, limited_rate)
        values (${tenant}, ${day}, 2, ${i + 1}, 0), (${tenant}, ${day}, 4, 2, 1)`
    }
  }
  const series = async () =>
    JSON.parse((await page.getByTestId('usage-chart').getAttribute('data-series')) ?? '{}') as {
      dates: string[]
      counts: Record<string, number[]>
    }
  const usageCalls = (from: number) => api.slice(from).filter((url) => url.pathname === '/v1/sub-accounts/usage')

  let before = api.length
  await page.getByRole('link', { name: 'Usage' }).click()
  await page.getByTestId('usage-chart').waitFor()
  const account = await series()
  t.same(account.dates, days, 'a bar a day of this month')
  t.same(
    account.counts,
    {
      '2xx': days.map((_, i) => 3 * (i + 1)),
      '3xx': days.map(() => 0),
      '4xx': days.map(() => 3),
      '429': days.map(() => 3),
      '5xx': days.map(() => 0),
    },
    'every day by class, the limits apart',
  )
  const accountCalls = usageCalls(before)
  t.equal(accountCalls.length, 1, `one usage call draws ${days.length} days`)
  t.equal(accountCalls[0]?.searchParams.get('granularity'), 'day')

  before = api.length
  await page.goto(`${gateway.url}/console#/sub-accounts/${zebra.id}`)
  await page.getByTestId('usage-chart').waitFor()
  await page.getByTestId('sub-month').waitFor()
  const one = await series()
  t.same(
    one.counts['2xx'],
    days.map((_, i) => i + 1),
    "the sub-account's own days",
  )
  const subCalls = usageCalls(before)
  t.same(
    subCalls.map((url) => [url.searchParams.get('granularity'), url.searchParams.get('sub_account_id')]).sort(),
    [
      ['range', zebra.id],
      ['day', zebra.id],
    ].sort(),
    "its month's total and its chart: one call each, for it alone",
  )
  t.match(
    await page.getByTestId('sub-month').innerText(),
    `${days.reduce((n, _, i) => n + i + 3, 0)} requests, ${days.length} refused by limits`,
  )
  t.same(errors, [], 'no page error')
})

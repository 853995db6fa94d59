// A limit's Preview on the console (docs/api.md, The limit simulator), in Debian's Chromium against
// a gateway with the real Postgres and a real upstream: traffic recorded in the request log, then
// limits tried before they are saved, for one sub-account and for every sub-account, show whom
// they would have refused, how often and when, and save nothing; a shadow limit's section shows
// what it would have refused beside the real 429s.
import type { Page } from 'playwright-core'
import t from 'tap'
import { axeFindings, launchBrowser } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gateway = await startGateway(t, {
  redis: false,
  gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
})
const parent = await gateway.createParent({ name: 'Previewing parent' })
const made = async (name: string, limits: unknown) => {
  const res = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name, limits },
  })
  if (res.statusCode !== 201) throw new Error(res.body)
  return (res.json() as { id: string }).id
}
const busy = await made('Busy', null)
const quiet = await made('Quiet', null)
const shadowed = await made('Shadowed', {
  rate: { requests: 3, per_seconds: 3600 },
  shadow: { rate: { requests: 1, per_seconds: 3600 }, monthly_quota: null },
})
const send = async (acting: string, n: number) => {
  const statuses: number[] = []
  for (let i = 0; i < n; i++)
    statuses.push((await callAs(gateway.url, parent.apiKey, { path: '/api/x', acting })).status)
  return statuses.join()
}
if ((await send(busy, 6)) !== '200,200,200,200,200,200') throw new Error('Busy was refused')
if ((await send(quiet, 2)) !== '200,200') throw new Error('Quiet was refused')
if ((await send(shadowed, 5)) !== '200,200,200,429,429') throw new Error('Shadowed: not 3 of 5')
await gateway.app.requestLog!.flush()
await gateway.app.usageMeter.flush()

const browser = await launchBrowser(t)
const page: Page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage()
page.setDefaultTimeout(15_000)
const errors: string[] = []
page.on('pageerror', (err) => errors.push(err.message))
await page.goto(`${gateway.url}/console`)
await page.getByLabel('Parent API key').fill(parent.apiKey)
await page.getByRole('button', { name: 'Sign in' }).click()
await page.getByRole('link', { name: 'Sub-accounts' }).first().waitFor()
const rows = async () =>
  page
    .getByTestId('preview-table')
    .locator('tbody tr')
    .evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].slice(0, 3).map((td) => td.textContent)))
const limitsOf = async (id: string) =>
  (await gateway.call(parent.apiKey, { method: 'GET', url: `/v1/sub-accounts/${id}`, acting: 'self' })).json().limits

t.test("a sub-account's Preview: whom the form's limits would have refused, nothing saved", async (t) => {
  await page.goto(`${gateway.url}/console#/sub-accounts/${busy}`)
  await page.getByLabel('Rate: requests').last().fill('2')
  await page.getByLabel('Rate: per seconds').last().fill('3600')
  await page.getByRole('button', { name: 'Preview' }).click()
  const summary = page.getByTestId('preview-summary')
  await summary.waitFor()
  t.equal(
    await summary.innerText(),
    'These limits, over the last 7 days, would have refused 4 of 6 requests (67 %), of 1 sub-account.',
  )
  t.same(await rows(), [['Busy', '6', '4']], 'the table: who, how many requests, how many refused')
  t.match(await page.getByTestId('preview-chart').getAttribute('aria-label'), /Busy: 4 of 6 refused/, 'the chart')
  t.match(await page.getByTestId('preview-table').innerText(), /\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/, 'and when')
  t.equal(await page.getByLabel('Rate: requests').last().inputValue(), '2', 'the form keeps what was typed')
  t.same(await limitsOf(busy), { rate: null, monthly_quota: null }, 'nothing saved')
  t.same(await axeFindings(page, 'limit-preview'), [], 'axe finds nothing')
})

t.test('every sub-account under one limit: each refused as its own, most first', async (t) => {
  await page.goto(`${gateway.url}/console#/sub-accounts`)
  await page.getByRole('button', { name: 'Try a limit on every sub-account' }).click()
  await page.locator('#try-rate-requests').fill('1')
  await page.locator('#try-rate-seconds').fill('3600')
  await page.getByRole('button', { name: 'Preview' }).click()
  await page.getByTestId('preview-table').waitFor()
  // Shadowed's 5 attempts reached the limits (3 forwarded, 2 refused by its own rate): 4 refused.
  t.same(await rows(), [
    ['Busy', '6', '5'],
    ['Shadowed', '5', '4'],
    ['Quiet', '2', '1'],
  ])
  t.match(
    await page.getByTestId('preview-summary').innerText(),
    /would have refused 10 of 13 requests \(77 %\), of 3 sub-accounts/,
  )
  t.same(
    [await page.locator('#try-rate-requests').inputValue(), await page.locator('#try-rate-seconds').inputValue()],
    ['1', '3600'],
    'the limits tried stay in the form',
  )
  t.same(await axeFindings(page, 'limit-preview-every'), [], 'axe finds nothing')
})

t.test("a shadow limit's section: what it would have refused beside the real 429s", async (t) => {
  await page.goto(`${gateway.url}/console#/sub-accounts/${shadowed}`)
  const wouldRefuse = page.getByTestId('shadow-would-refuse')
  await wouldRefuse.waitFor()
  t.match(
    await wouldRefuse.innerText(),
    /^4 of 5 requests, the first at \d{4}-/,
    'the shadow rate of 1, enforced alone',
  )
  t.equal(await page.getByTestId('shadow-real-refusals').innerText(), '2: 2 by the rate, 0 by the monthly quota')
  t.same(await axeFindings(page, 'shadow-limits'), [], 'axe finds nothing')
  t.same(errors, [], 'no page errors')
})

t.test('a log kept fewer days than 7: the Preview replays the days it holds', async (t) => {
  const short = await startGateway(t, { redis: false, env: { REQUEST_LOG_RETENTION_DAYS: '3' } })
  const shortParent = await short.createParent({ name: 'Short memory' })
  const made = await short.call(shortParent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'Kept 3 days' },
  })
  const other = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage()
  other.setDefaultTimeout(15_000)
  await other.goto(`${short.url}/console`)
  await other.getByLabel('Parent API key').fill(shortParent.apiKey)
  await other.getByRole('button', { name: 'Sign in' }).click()
  await other.getByRole('link', { name: 'Sub-accounts' }).first().waitFor()
  await other.goto(`${short.url}/console#/sub-accounts/${made.json().id}`)
  await other.getByLabel('Rate: requests').last().fill('2')
  await other.getByLabel('Rate: per seconds').last().fill('60')
  await other.getByRole('button', { name: 'Preview' }).click()
  await other.getByTestId('preview-summary').waitFor()
  t.match(await other.getByTestId('preview-summary').innerText(), /saw no request/, 'a Preview, not a refusal')
})

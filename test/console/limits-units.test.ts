// Limits in units on the console (docs/api.md, Limits in units), in Debian's Chromium against a
// gateway with the real Postgres: a sub-account's limits in a meter's units are shown beside its
// request limits, and saving the request limits from the form keeps them, with the quota's alert
// thresholds and the shadow limits, which the form does not edit (a PATCH replaces the whole object).
import t from 'tap'
import type { Page } from 'playwright-core'
import { axeFindings, launchBrowser } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'

const gateway = await startGateway(t, { redis: false })
const parent = await gateway.createParent({ name: 'Metered parent' })
const meters = { tokens: { rate: { units: 50_000, per_seconds: 60 }, monthly_quota: { units: 20_000_000 } } }
const created = await gateway.call(parent.apiKey, {
  method: 'POST',
  url: '/v1/sub-accounts',
  acting: 'self',
  body: {
    name: 'Metered',
    limits: {
      monthly_quota: { requests: 900, alert_thresholds: [50] },
      meters,
      shadow: { rate: { requests: 2, per_seconds: 3600 } },
    },
  },
})
if (created.statusCode !== 201) throw new Error(created.body)
const sub = created.json() as { id: string }

const browser = await launchBrowser(t)
const page: Page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
page.setDefaultTimeout(10_000)
const errors: string[] = []
page.on('pageerror', (err) => errors.push(err.message))
await page.goto(`${gateway.url}/console`)
await page.getByLabel('Parent API key').fill(parent.apiKey)
await page.getByRole('button', { name: 'Sign in' }).click()
await page.getByRole('link', { name: 'Sub-accounts' }).first().waitFor()

t.test('shown, and kept by a save of the request limits', async (t) => {
  await page.goto(`${gateway.url}/console#/sub-accounts/${sub.id}`)
  const shown = page.getByTestId('sub-limits')
  await shown.waitFor()
  t.equal(
    await shown.innerText(),
    '900 a month, tokens: 50,000 per minute, 20,000,000 a month',
    'the summary names the meter',
  )
  t.match(
    await page.getByTestId('meter-limits').innerText(),
    /set through the API, kept when you save\): tokens: 50,000 per minute, 20,000,000 a month/,
    'the form says what it keeps',
  )
  t.match(
    await page.getByTestId('shadow-limits').innerText(),
    /never refusing \(set through the API, kept when you save\): 2 per hour$/,
    'and its shadow limits',
  )
  await page.getByLabel('Rate: requests').last().fill('8')
  await page.getByLabel('Rate: per seconds').last().fill('3600')
  await page.getByRole('button', { name: 'Save limits' }).click()
  await page.getByTestId('limits-saved').waitFor()
  const saved = await gateway.call(parent.apiKey, { method: 'GET', url: `/v1/sub-accounts/${sub.id}`, acting: 'self' })
  t.same(
    saved.json().limits,
    {
      rate: { requests: 8, per_seconds: 3600 },
      monthly_quota: { requests: 900, alert_thresholds: [50] },
      meters: { tokens: { rate: { units: 50_000, per_seconds: 60 }, monthly_quota: { units: 20_000_000 } } },
      shadow: { rate: { requests: 2, per_seconds: 3600 }, monthly_quota: null },
    },
    'the rate saved; the thresholds, the limits in units and the shadow limits kept',
  )
  t.same(await axeFindings(page, 'limits-units'), [], 'axe finds nothing')
  t.same(errors, [], 'no page errors')
})

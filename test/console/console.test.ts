// The console in a real browser (docs/console.md), against a gateway on a socket with the real
// Postgres and Redis and an upstream: sign-in, sub-accounts, keys, limits, proxied traffic drawn
// by the usage chart, the audit log, webhook endpoints, every kind of error shown, axe-core on
// every screen, and screenshots at 1280 and 390 pixels wide.
import t from 'tap'
import type { Page } from 'playwright-core'
import { mintKey } from '../../src/auth/mint.js'
import { KEY_COMMANDS } from '../../src/cli/key-commands.js'
import type { Config } from '../../src/config.js'
import {
  type AxeFinding,
  axeFindings,
  launchBrowser,
  screenshots,
  watchPage,
  writeArtifact,
} from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually, sleep } from '../helpers/poll.js'
import { REDIS_URL } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'
import { answerOk, startReceiver } from '../helpers/webhook-receiver.js'

const upstream = await startUpstream(t, (request, response) => {
  const status = request.url === '/v1/missing' ? 404 : request.url === '/v1/boom' ? 500 : 200
  response.writeHead(status, { 'content-type': 'application/json' })
  response.end('{}')
})
const gateway = await startGateway(t, {
  upstreamUrl: upstream.url,
  // Beside the catch-all: a WebSocket route and a public one, for the Routes screen.
  gatewayConfig: {
    routes: [
      {
        prefix: '/live',
        upstream: upstream.url,
        scopes: { read: ['live:read'], write: ['live:write'] },
        websocket: true,
        max_websockets_per_tenant: 7,
        websocket_idle_timeout_ms: 120_000,
        websocket_max_message_bytes: 65_536,
      },
      { prefix: '/status', upstream: `${upstream.url}/internal-base`, public: true },
    ],
  },
  usageFlushIntervalMs: 100,
  env: { WEBHOOKS_ALLOW_INSECURE: 'true' },
  webhookDelivery: { pollIntervalMs: 50 },
})
const parent = await gateway.createParent({ name: 'Console parent' })
const browser = await launchBrowser(t)
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: gateway.url })
const page: Page = await context.newPage()
// A step that cannot happen fails in 10 s, not playwright's 30.
page.setDefaultTimeout(10_000)

// Everything the page asks for must be the gateway's, and the policy must refuse nothing it does.
const { foreign, violations } = watchPage(page, gateway.url)
// Deactivate, roll, revoke and delete ask first: accepted, unless a test says no (`confirmAnswer`).
const asked: string[] = []
let confirmAnswer = true
page.on('dialog', (dialog) => {
  asked.push(dialog.message())
  void (confirmAnswer ? dialog.accept() : dialog.dismiss())
})

const findings: AxeFinding[] = []
const overflow: Record<string, number> = {}
const widest: Record<string, string[]> = {}
async function screen(name: string) {
  findings.push(...(await axeFindings(page, name)))
  const shot = await screenshots(page, name)
  overflow[name] = shot.overflowAt390
  if (shot.overflowAt390 > 0) widest[name] = shot.widest
}

/** Polls `check` for up to 10 s; fails the test with `what` if it never holds. */
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  if ((await eventually(10_000, check, 100)) === null) throw new Error(`never: ${what}`)
}

const alert = () => page.getByRole('alert')
const live = () => page.getByTestId('live')
let subId = ''
let mintedKey = ''

t.teardown(async () => {
  const counts = { minor: 0, moderate: 0, serious: 0, critical: 0 }
  for (const f of findings) counts[f.impact]++
  await writeArtifact('axe.json', { counts, findings })
})

/** What cardsFit asks of a subtest. */
interface Asserts {
  ok(value: unknown, message: string): unknown
  equal(found: unknown, wanted: unknown, message: string): unknown
  same(found: unknown, wanted: unknown, message: string): unknown
}

/**
 * At 390 pixels, a table of cards: every cell of every row within the window (none off the right
 * edge, nor scrolled to), under its column's name. Back at 1280 after.
 */
async function cardsFit(t: Asserts, testId: string): Promise<void> {
  await page.setViewportSize({ width: 390, height: 844 })
  await page.waitForTimeout(100)
  const cells = await page
    .getByTestId(testId)
    .locator('tbody td')
    .evaluateAll((tds) =>
      tds.map((td) => {
        const r = td.getBoundingClientRect()
        return {
          label: getComputedStyle(td, '::before').content,
          right: r.right,
          left: r.left,
          actions: td.classList.contains('row-actions'),
        }
      }),
    )
  const wrap = await page
    .getByTestId(testId)
    .evaluate((table) => (table.parentElement!.scrollWidth - table.parentElement!.clientWidth) as number)
  await page.setViewportSize({ width: 1280, height: 800 })
  t.ok(cells.length > 0, `${testId}: cells`)
  t.same(
    cells.filter((c) => c.right > 391 || c.left < 0),
    [],
    `${testId}: every cell within the 390 px window`,
  )
  t.equal(wrap <= 0, true, `${testId}: nothing to scroll sideways to`)
  t.same(
    cells.filter((c) => !c.actions && !/^"[A-Z]/.test(c.label)),
    [],
    `${testId}: each cell under its column's name`,
  )
}

t.test('sign-in: a wrong key is refused with a clear message, the right one signs in', async (t) => {
  const response = await page.goto(`${gateway.url}/console`)
  t.equal(response?.status(), 200)
  await page.getByLabel('Parent API key').waitFor()
  t.match(await page.getByRole('heading', { level: 1 }).innerText(), /tenancy-gateway/, 'the product named')
  t.match(
    await page.locator('#signin-help').innerText(),
    /embedded database, the gateway prints one on its first start; with your own Postgres/,
    'where a key comes from, with either store',
  )
  await page.keyboard.press('Tab')
  t.equal(await page.evaluate(() => document.activeElement?.id), 'key', 'the key field takes focus first')
  await screen('signin')

  await page.getByLabel('Parent API key').fill(`tgw_${'A'.repeat(49)}`)
  await page.keyboard.press('Enter')
  await alert().waitFor()
  const text = await alert().innerText()
  t.match(text, /401/, 'the status')
  t.match(text, /unauthenticated/, 'the code')
  t.match(text, /sign in again/i, 'what to do')
  t.equal(await page.evaluate(() => sessionStorage.length), 0, 'a refused key is not kept')

  await page.getByLabel('Parent API key').fill(parent.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  t.equal(await page.evaluate(() => Object.values(sessionStorage).join()), parent.apiKey, 'kept in sessionStorage')
  t.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage')
  await page.getByText('No sub-accounts yet').waitFor()
  t.pass('the empty state')

  const timing = await page.evaluate(() => {
    const nav = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming
    const assets = (performance.getEntriesByType('resource') as PerformanceResourceTiming[])
      .filter((r) => r.name.includes('/console/assets/'))
      .map((r) => ({
        name: r.name.replace(/.*\//, ''),
        startTime: r.startTime,
        responseEnd: r.responseEnd,
        transferSize: r.transferSize,
        encodedBodySize: r.encodedBodySize,
        decodedBodySize: r.decodedBodySize,
      }))
    return {
      domContentLoaded: nav.domContentLoadedEventEnd,
      load: nav.loadEventEnd,
      htmlResponseEnd: nav.responseEnd,
      assets,
    }
  })
  await writeArtifact('timing.json', timing)
  t.comment(`page load ${timing.load.toFixed(0)} ms (DOMContentLoaded ${timing.domContentLoaded.toFixed(0)} ms)`)
  t.equal(timing.assets.length, 2, 'one script and one stylesheet')
  const script = timing.assets.find((a) => a.name.endsWith('.js'))!
  t.ok(script.encodedBodySize < 150 * 1024, `script ${script.encodedBodySize} bytes compressed, under 150 KB`)
  t.ok(script.encodedBodySize < script.decodedBodySize, 'served gzipped')
  const [first, second] = timing.assets
  t.ok(second!.startTime < first!.responseEnd, 'both requested before either finished: no waterfall')
})

t.test('the keyboard: focus follows the page, every section reached with Tab and Enter', async (t) => {
  await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur())
  const order: string[] = []
  for (let i = 0; i < 9; i++) {
    await page.keyboard.press('Tab')
    order.push(await page.evaluate(() => document.activeElement?.textContent?.trim() ?? ''))
  }
  t.same(
    order,
    [
      'Skip to content',
      'Sub-accounts',
      'Usage',
      'Requests',
      'Audit log',
      'Webhooks',
      'Routes',
      'Sign out',
      'New sub-account',
    ],
    'skip link, navigation, sign out, then the screen',
  )
  // Back past Sign out and Routes, to Webhooks.
  await page.keyboard.press('Shift+Tab')
  await page.keyboard.press('Shift+Tab')
  await page.keyboard.press('Shift+Tab')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Webhook endpoints' }).waitFor()
  t.equal(await page.evaluate(() => document.activeElement?.id), 'main', 'a new screen takes focus at its start')
  await page.getByRole('link', { name: 'Sub-accounts' }).press('Enter')
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
})

t.test('sub-accounts: create (or cancel), a conflict shown, search and filter', async (t) => {
  await page.getByRole('button', { name: 'New sub-account' }).click()
  await page.getByLabel('Name', { exact: true }).fill('Never made')
  await page.getByRole('button', { name: 'Cancel' }).click()
  await page.getByRole('heading', { name: 'New sub-account' }).waitFor({ state: 'detached' })
  t.equal(
    await page.evaluate(() => document.activeElement?.textContent),
    'New sub-account',
    'Cancel closes the form, focus back on its button',
  )
  await page.getByRole('button', { name: 'New sub-account' }).click()
  await page.getByLabel('Name', { exact: true }).fill('Acme EU')
  await page.getByLabel('External id (optional)').fill('acme-eu')
  await page.getByRole('button', { name: 'Create' }).click()
  await page.getByRole('heading', { name: 'Acme EU' }).waitFor()
  subId = decodeURIComponent(page.url().replace(/.*#\/sub-accounts\//, ''))
  t.match(subId, /^[0-9a-f-]{36}$/, 'on its page')

  await page.goto(`${gateway.url}/console#/sub-accounts`)
  await page.getByRole('button', { name: 'New sub-account' }).click()
  await page.getByLabel('Name', { exact: true }).fill('Acme again')
  await page.getByLabel('External id (optional)').fill('acme-eu')
  await page.getByRole('button', { name: 'Create' }).click()
  await alert().waitFor()
  const text = await alert().innerText()
  t.match(text, /409/, 'the status')
  t.match(text, /external_id_conflict/, 'the code')
  t.match(text, /choose another/i, 'what to do')
  await page.getByRole('button', { name: 'New sub-account' }).click()

  await page.getByLabel('Name or external id').fill('ACME')
  await page.getByRole('button', { name: 'Search' }).click()
  await until(async () => (await live().innerText()).includes('1 sub-account match'), 'the live region says')
  t.equal(await page.getByTestId('subaccounts').locator('tbody tr').count(), 1, 'found by name')
  await page.getByLabel('Status').selectOption('deactivated')
  await page.getByText('No sub-account matches').waitFor()
  t.pass('the status filter')
  await page.getByLabel('Status').selectOption('active')
  await page.getByRole('button', { name: 'Clear the search' }).click()
  await page.getByTestId('subaccounts').waitFor()
  await screen('subaccounts')
})

t.test('keys: mint shown once, roll, revoke; limits; deactivate and reactivate', async (t) => {
  await page.goto(`${gateway.url}/console#/sub-accounts/${subId}`)
  await page.getByRole('heading', { name: 'Acme EU' }).waitFor()

  // A scope the API refuses: 400 validation_failed, with the field.
  await page.getByLabel('Name', { exact: true }).last().fill('bad')
  await page.getByLabel(/^Scopes/).fill('sub_accounts:read')
  await page.getByRole('button', { name: 'Mint key' }).click()
  await alert().waitFor()
  t.match(await alert().innerText(), /validation_failed[\s\S]*\/body\/scopes/, 'a 400 names the field')

  // The expiry's shortcuts fill the field (local time, to the minute), or empty it.
  await page.getByRole('button', { name: 'In 30 days' }).click()
  const offset = await page.evaluate(() => {
    const value = (document.getElementById('mint-expires') as HTMLInputElement).value
    return new Date(value).getTime() - Date.now()
  })
  t.ok(Math.abs(offset - 30 * 86_400_000) < 120_000, `"In 30 days" fills in 30 days from now (${offset} ms)`)
  await page.getByRole('button', { name: 'No expiry' }).click()
  t.equal(await page.getByLabel(/Expires at/).inputValue(), '', '"No expiry" empties it')

  // The routes' scopes offered beside the field: a press adds one, a second press takes it out.
  const picker = page.getByTestId('scope-picker')
  t.same(await picker.getByRole('button').allInnerTexts(), ['live:read', 'live:write'], "the routes' scopes")
  await page.getByLabel(/^Scopes/).fill('tracking:read')
  await picker.getByRole('button', { name: 'live:read' }).click()
  t.equal(await page.getByLabel(/^Scopes/).inputValue(), 'tracking:read live:read', 'added to the field')
  t.equal(await picker.getByRole('button', { name: 'live:read' }).getAttribute('aria-pressed'), 'true', 'pressed')
  await picker.getByRole('button', { name: 'live:read' }).click()
  t.equal(await page.getByLabel(/^Scopes/).inputValue(), 'tracking:read', 'taken out again')

  await page.getByLabel('Name', { exact: true }).last().fill('ci')
  await page.getByLabel(/^Scopes/).fill('tracking:read tracking:write')
  await page.getByLabel(/Expires at/).fill('2035-01-01T12:00')
  await page.getByRole('button', { name: 'Mint key' }).click()
  const dialog = page.getByTestId('dialog')
  await dialog.waitFor()
  mintedKey = await page.getByLabel('API key', { exact: true }).inputValue()
  t.match(mintedKey, /^tgw_/, 'the key, once')
  t.match(await page.getByLabel('Client secret', { exact: true }).inputValue(), /^tgws_/, 'the client secret')
  await page.getByRole('button', { name: 'Copy api key' }).click()
  t.equal(await page.evaluate(() => navigator.clipboard.readText()), mintedKey, 'the copy button copies it')
  await screen('key-minted')
  await page.keyboard.press('Escape')
  await dialog.waitFor({ state: 'detached' })
  t.equal(await page.locator('[data-secret]').count(), 0, 'gone when the dialog closes')
  t.notOk((await page.content()).includes(mintedKey), 'nowhere in the page')
  t.match(await page.getByTestId('keys').innerText(), /2035-01-01/, 'its expiry listed')

  // Limits, through the form: 8 requests an hour, 1000 a month.
  await page.getByLabel('Rate: requests').last().fill('8')
  await page.getByLabel('Rate: per seconds').last().fill('3600')
  await page.getByLabel('Monthly quota: requests').last().fill('1000')
  await page.getByRole('button', { name: 'Save limits' }).click()
  await until(
    async () => (await page.getByTestId('sub-limits').innerText()) === '8 per hour, 1000 a month',
    'limits shown',
  )
  t.pass('limits saved')
  t.match(
    await page.getByTestId('limits-saved').innerText(),
    /^✓ Limits saved at \d\d:\d\d:\d\d UTC$/,
    'a visible confirmation under the form',
  )
  t.ok(await page.getByTestId('limits-saved').isVisible(), 'visible, not only in the live region')
  await page.getByLabel('External id', { exact: true }).fill('acme-eu-1')
  // Metadata, a field a row: a key twice is refused before any call, then saved.
  await page.getByRole('button', { name: 'Add a field' }).click()
  await page.getByLabel('Key 1', { exact: true }).fill('plan')
  await page.getByLabel('Value 1', { exact: true }).fill('pro')
  await page.getByRole('button', { name: 'Add a field' }).click()
  await page.getByLabel('Key 2', { exact: true }).fill('plan')
  await page.getByRole('button', { name: 'Save details' }).click()
  await page.getByTestId('metadata').locator('xpath=..').getByRole('alert').waitFor()
  t.match(
    await page.getByTestId('metadata').locator('xpath=..').getByRole('alert').innerText(),
    /“plan” is there twice/,
    'a key twice, said',
  )
  await page.getByRole('button', { name: 'Remove field 2 (plan)' }).click()
  await page.getByRole('button', { name: 'Add a field' }).click()
  await page.getByLabel('Key 2', { exact: true }).fill('region')
  await page.getByLabel('Value 2', { exact: true }).fill('eu-west')
  await page.getByRole('button', { name: 'Save details' }).click()
  await page.getByTestId('edit-saved').waitFor()
  const saved = await gateway.call(parent.apiKey, { method: 'GET', url: `/v1/sub-accounts/${subId}`, acting: 'self' })
  t.same(saved.json().metadata, { plan: 'pro', region: 'eu-west' }, 'the metadata saved as edited')
  t.equal(saved.json().external_id, 'acme-eu-1', 'with the external id typed before the fields were added')
  t.equal(await page.getByLabel('Value 2', { exact: true }).inputValue(), 'eu-west', 'shown as saved')
  t.match(await page.getByTestId('edit-saved').innerText(), /Details saved at/, 'the details too')
  t.equal(await page.getByTestId('limits-saved').count(), 0, 'only the last save is confirmed')
  // The copy is asynchronous: the clipboard is read until it holds the value (or 10 s).
  const clipboardHolds = (value: string) =>
    until(async () => (await page.evaluate(() => navigator.clipboard.readText())) === value, `${value} copied`)
  await page.getByRole('button', { name: 'Copy the sub-account id' }).click()
  await clipboardHolds(subId)
  t.pass('the id copied')
  await page.getByRole('button', { name: 'Copy the external id' }).click()
  await clipboardHolds('acme-eu-1')
  t.pass('the external id copied')

  await page.getByRole('button', { name: 'Deactivate' }).click()
  await until(async () => (await page.getByTestId('sub-status').innerText()) === 'deactivated', 'deactivated')
  await page.getByRole('button', { name: 'Reactivate' }).click()
  await until(async () => (await page.getByTestId('sub-status').innerText()) === 'active', 'reactivated')
  t.pass('deactivated, then reactivated')
  await screen('subaccount')
})

t.test('proxied traffic, 429s included, drawn by the usage chart', async (t) => {
  await sleep(1_200) // a change of limits reaches the limiter within a second
  const send = async (path: string) => {
    const res = await fetch(`${gateway.url}/v1/${path}`, { headers: { authorization: `Bearer ${mintedKey}` } })
    await res.arrayBuffer()
    return res.status
  }
  const statuses: number[] = []
  for (const path of ['ok', 'ok', 'ok', 'ok', 'ok', 'missing', 'missing', 'boom']) statuses.push(await send(path))
  // Then until the limit (8 an hour) has refused three: three more on a quiet machine.
  while (statuses.filter((s) => s === 429).length < 3 && statuses.length < 30) statuses.push(await send('ok'))
  const count = (status: number) => statuses.filter((s) => s === status).length
  t.same(statuses.slice(0, 8), [200, 200, 200, 200, 200, 404, 404, 500], 'answered by the upstream')
  t.equal(count(429), 3, 'three refused by the rate limit')
  t.equal(count(200) + count(404) + count(500), 8, 'the limit let 8 through')
  const today = new Date().toISOString().slice(0, 10)
  const expected = { '2xx': count(200), '3xx': 0, '4xx': count(404), '429': count(429), '5xx': count(500) }
  const total = statuses.length

  const chartOfToday = async () => {
    const raw = await page.getByTestId('usage-chart').getAttribute('data-series')
    const series = JSON.parse(raw ?? '{}') as { dates: string[]; counts: Record<string, number[]> }
    const i = series.dates.indexOf(today)
    return Object.fromEntries(Object.entries(series.counts).map(([c, values]) => [c, values[i]]))
  }
  await page.goto(`${gateway.url}/console#/sub-accounts/${subId}`)
  let drawn: Record<string, unknown> = {}
  await until(async () => {
    await page.getByRole('button', { name: 'Show usage' }).click()
    await page.getByTestId('usage-chart').waitFor()
    drawn = await chartOfToday()
    const month = await page.getByTestId('sub-month').innerText()
    return drawn['429'] === 3 && drawn['2xx'] === expected['2xx'] && month.includes(`${total} requests`)
  }, 'the usage reaches the chart').catch((err) => {
    throw new Error(`${err.message}: ${JSON.stringify(drawn)} on ${today}`)
  })
  t.same(drawn, expected, "the sub-account's chart: today's counts by class, the 429s apart")
  t.match(await page.getByTestId('sub-month').innerText(), `${total} requests, 3 refused by limits`)
  t.match(await page.getByTestId('sub-quota').innerText(), /8 of 1000/, "this month's use of its quota")
  // The numbers below the chart: the days with requests only (today), and a total.
  await page.getByTestId('usage-chart').locator('summary').click()
  const dayRows = await page.getByTestId('usage-chart').locator('tbody tr th').allInnerTexts()
  t.same(dayRows, [today], 'only the days with requests listed, not every zero day of the month')
  const totals = await page.getByTestId('usage-total').locator('td').allInnerTexts()
  t.same(
    totals,
    [expected['2xx'], expected['3xx'], expected['4xx'], expected['429'], expected['5xx']].map(String),
    'a total row, by class',
  )
  t.ok(await page.locator('.chart-canvas canvas').count(), 'drawn on a canvas')

  await page.getByRole('link', { name: 'Usage' }).click()
  await page.getByRole('heading', { name: 'Usage' }).waitFor()
  await page.getByTestId('usage-chart').waitFor()
  t.same(await chartOfToday(), expected, "the whole account's chart")
  t.match(await page.getByTestId('account-quota').innerText(), /no monthly quota/)
  await page.getByLabel('From (UTC date)').fill('2025-01-01')
  await page.getByLabel('To (UTC date)').fill('2026-01-02')
  await page.getByRole('button', { name: 'Show usage' }).click()
  await alert().waitFor()
  t.match(await alert().innerText(), /at most 366 days/, 'a range longer than the report takes')
  await page.getByLabel('From (UTC date)').fill(`${today.slice(0, 8)}01`)
  await page.getByLabel('To (UTC date)').fill(today)
  await page.getByRole('button', { name: 'Show usage' }).click()
  await page.getByTestId('usage-chart').waitFor()
  await screen('usage')
})

/** Each control of the keys table and its accessible name, as a screen reader hears it. */
async function keyControls(): Promise<string[]> {
  return page
    .getByTestId('keys')
    .locator('a, button, select, input')
    .evaluateAll((els) =>
      els.map((el) => {
        const labels = 'labels' in el ? (el as HTMLSelectElement).labels : null
        const name = labels !== null && labels.length > 0 ? labels[0]!.textContent : el.textContent
        return `${el.tagName.toLowerCase()}: ${(name ?? '').replace(/\s+/g, ' ').trim()}`
      }),
    )
}

t.test('roll (asked first) and revoke, then every change in the audit log', async (t) => {
  await page.goto(`${gateway.url}/console#/sub-accounts/${subId}`)
  await page.getByTestId('keys').waitFor()
  const prefix = (await page.getByTestId('keys').locator('tbody tr td').nth(1).innerText()).replace('…', '')
  t.match(prefix, /^tgw_/, "the key's prefix listed")
  const oldLabel = `ci (${prefix}…)`
  t.match(await page.getByTestId('keys').innerText(), /2035-01-01/, 'an expiry listed as a time')

  // Roll asks first, naming the key and how long the old one keeps working; No leaves it be.
  confirmAnswer = false
  await page.getByRole('button', { name: `Roll ${oldLabel}`, exact: true }).click()
  await until(async () => asked.length > 0 && asked.at(-1)!.startsWith('Roll'), 'the roll asked first')
  t.match(asked.at(-1), `Roll the key ${oldLabel}?`, 'the question names the key by its prefix')
  t.match(asked.at(-1), /keeps working for a day/, 'and the overlap')
  await sleep(300)
  t.equal(await page.getByTestId('dialog').count(), 0, 'no roll when the answer is no')
  t.equal(await page.getByTestId('keys').locator('tbody tr').count(), 1, 'still one key')
  confirmAnswer = true

  await page.getByRole('button', { name: `Roll ${oldLabel}`, exact: true }).click()
  await page.getByTestId('dialog').waitFor()
  const rolled = await page.getByLabel('API key', { exact: true }).inputValue()
  t.match(rolled, /^tgw_/, 'the new key, once')
  t.not(rolled, mintedKey)
  await page.getByRole('button', { name: 'Close' }).click()
  await page.getByTestId('dialog').waitFor({ state: 'detached' })
  await until(async () => (await page.getByTestId('keys').locator('tbody tr').count()) === 2, 'two keys listed')

  // Two keys named ci: every control says which one it acts on, by its prefix.
  const controls = await keyControls()
  t.equal(controls.length, 8, 'Requests, the overlap, Roll and Revoke, for each key')
  t.same([...new Set(controls)], controls, `every accessible name is unique: ${controls.join('; ')}`)
  for (const control of controls) t.match(control, /\(tgw_\w+…\)/, `"${control}" names the key's prefix`)
  const newPrefix = rolled.slice(0, prefix.length)
  const newLabel = `ci (${newPrefix}…)`
  await page.getByRole('button', { name: `Revoke ${newLabel}`, exact: true }).waitFor()
  await page.getByRole('combobox', { name: `Old key of ${oldLabel} keeps working for`, exact: true }).waitFor()
  // A key's row, by its prefix cell (another row may name it: "replaced by …").
  const rowOf = (p: string) =>
    page.getByTestId('keys').locator('tbody tr', { has: page.locator('td:nth-child(2)', { hasText: `${p}…` }) })
  const statusOf = (p: string) => rowOf(p).getByTestId('key-status').innerText()
  t.match(await statusOf(newPrefix), `replaces ${prefix}…`, 'the new key says which it replaced')
  t.match(await statusOf(prefix), `replaced by ${newPrefix}…`, 'the old one says which replaced it')
  t.match(await rowOf(newPrefix).innerText(), /2035-01-01/, "the new key keeps the old one's expiry")

  await page.getByRole('button', { name: `Revoke ${oldLabel}`, exact: true }).click()
  await until(async () => (await statusOf(prefix)).includes('revoked'), 'a key revoked')
  t.match(await statusOf(prefix), /revoked\s+revoked \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/, 'when it was revoked')
  t.equal(
    (await keyControls()).filter((c) => c.includes(prefix)).length,
    1,
    'a revoked key keeps its Requests link only',
  )
  await page.getByLabel('Hide revoked keys').check()
  await until(async () => (await page.getByTestId('keys').locator('tbody tr').count()) === 1, 'the revoked key hidden')
  t.equal(await rowOf(prefix).count(), 0, 'the revoked key hidden')
  await page.getByLabel('Hide revoked keys').uncheck()
  await until(async () => (await page.getByTestId('keys').locator('tbody tr').count()) === 2, 'shown again')
  t.pass('rolled and revoked')
  await screen('keys-rolled')

  await page.getByRole('link', { name: 'Audit log' }).click()
  await page.getByTestId('events').waitFor()
  const types = await page
    .getByTestId('events')
    .locator('tbody tr')
    .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-type')))
  for (const type of [
    'sub_account.created',
    'api_key.created',
    'sub_account.updated',
    'sub_account.deactivated',
    'sub_account.reactivated',
    'api_key.rolled',
    'api_key.revoked',
  ])
    t.ok(types.includes(type), `${type} in the audit log`)
  await page.getByLabel('Type').selectOption('api_key.*')
  await page.getByRole('button', { name: 'Filter' }).click()
  await until(async () => {
    const filtered = await page
      .getByTestId('events')
      .locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-type')))
    return filtered.length > 0 && filtered.every((type) => type?.startsWith('api_key.'))
  }, 'only key events')
  await page.getByLabel('Type').selectOption('')
  await page.getByLabel('Target id').fill(subId)
  await page.getByRole('button', { name: 'Filter' }).click()
  // Its five changes (two saves), and the alerts of its rate limit above (rate_limit.exceeded targets it too).
  await until(async () => {
    const rows = await page
      .getByTestId('events')
      .locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => [r.getAttribute('data-target'), r.getAttribute('data-type')]))
    const changes = rows.filter(([, type]) => type?.startsWith('sub_account.')).length
    return changes === 5 && rows.every(([id]) => id === subId)
  }, "the sub-account's own events")
  t.pass('filtered by type and by target')
  // A target by its name, linked; its id under it.
  const target = page.getByTestId('events').locator('tr[data-type^="sub_account."]').first().getByTestId('event-target')
  t.equal(await target.getByRole('link').innerText(), 'Acme EU', 'the sub-account by its name')
  t.match(await target.innerText(), subId, 'and its id')
  await screen('events')

  // A date range: from tomorrow, nothing; to today, everything again.
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10)
  await page.getByLabel('From (UTC date)').fill(tomorrow)
  await page.getByRole('button', { name: 'Filter' }).click()
  await page.getByText('No event matches').waitFor()
  await page.getByLabel('From (UTC date)').fill('')
  await page.getByLabel(/^To \(UTC date/).fill(new Date().toISOString().slice(0, 10))
  await page.getByRole('button', { name: 'Filter' }).click()
  await page.getByTestId('events').waitFor()
  t.pass('filtered by UTC dates')

  // The sub-account's page links to its events: its own and its keys' (test/console/audit-webhooks.test.ts
  // checks which).
  await page.goto(`${gateway.url}/console#/sub-accounts/${subId}`)
  await page.getByRole('link', { name: 'Events of Acme EU' }).click()
  await page.getByTestId('events').waitFor()
  t.equal(await page.getByLabel(/^Sub-account id/).inputValue(), subId, 'the filter set from the address')
  await until(async () => {
    const types = await page
      .getByTestId('events')
      .locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-type')))
    return types.includes('sub_account.created') && types.includes('api_key.created')
  }, "the sub-account's events with its keys'")
})

t.test('webhook endpoints: secret once, a real delivery listed, delete', async (t) => {
  const receiver = await startReceiver(t)
  await page.getByRole('link', { name: 'Webhooks' }).click()
  await page.getByText('No webhook endpoints yet').waitFor()
  await page.getByLabel('URL (https)').fill(receiver.url)
  // The event types are picked from the catalogue: a kind's every event, or single types.
  const offered = await page
    .getByRole('group', { name: 'Event types' })
    .getByRole('checkbox')
    .evaluateAll((boxes) => boxes.map((b) => (b as HTMLInputElement).value))
  for (const type of ['sub_account.*', 'sub_account.created', 'api_key.*', 'api_key.rolled', 'webhook_endpoint.test'])
    t.ok(offered.includes(type), `${type} offered`)
  await page.getByLabel('Every sub_account event (sub_account.*)').check()
  await page.getByLabel('Every api_key event (api_key.*)').check()
  await page.getByRole('button', { name: 'Create endpoint' }).click()
  await page.getByTestId('dialog').waitFor()
  const secret = await page.getByLabel('Signing secret').inputValue()
  t.match(secret, /^whsec_/, 'the secret, once')
  receiver.secret(secret)
  await page.getByRole('button', { name: 'Close' }).click()
  await page.getByTestId('dialog').waitFor({ state: 'detached' })
  t.equal(await page.locator('[data-secret]').count(), 0, 'gone when the dialog closes')
  await page.getByTestId('endpoints').waitFor()

  // No change since it was made: the empty state.
  await page.getByRole('button', { name: /^Deliveries/ }).click()
  const deliveries = page.getByTestId('deliveries')
  await deliveries.getByText('No delivery yet').waitFor()
  t.pass('no delivery yet')

  // A change the endpoint subscribes to: the worker delivers it to the receiver, signed.
  const made = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'Delivered' },
  })
  t.equal(made.statusCode, 201)
  await until(async () => receiver.deliveries.length === 1, 'the receiver got the event')
  const [got] = receiver.deliveries
  t.ok(got?.verified, 'signed with the secret the dialog showed')

  // The deliveries screen lists that very attempt, as the route answers it.
  await until(async () => {
    await page.getByRole('link', { name: 'Audit log' }).click()
    await page.getByTestId('events').waitFor()
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByRole('button', { name: /^Deliveries/ }).click()
    await deliveries.locator('table, .empty').first().waitFor()
    return (await deliveries.locator('tbody tr').count()) === 1
  }, 'the attempt listed')
  t.match(await page.getByTestId('endpoints').innerText(), 'sub_account.* api_key.*', 'the types picked')
  const cells = await deliveries.locator('tbody tr td').allInnerTexts()
  t.equal(cells[0], got!.id, 'its event id, the webhook-id the receiver got')
  t.equal(cells[1], 'sub_account.created', 'its type')
  t.equal(cells[2], '1', 'the first attempt')
  t.equal(cells[3], '200', "the receiver's status")
  t.equal(cells[4], '—', 'no error')
  t.match(cells[5], /^\d+ ms$/, 'its duration')
  t.equal(cells[7], '—', 'no next attempt')
  t.match(await live().innerText(), /1 delivery shown/, 'announced')
  await screen('webhooks')

  // A receiver that fails: the attempt with its status, the error and when the next one is due.
  receiver.answer((_delivery, response) => response.writeHead(503).end())
  const failing = await gateway.call(parent.apiKey, {
    method: 'PATCH',
    url: `/v1/sub-accounts/${made.json().id}`,
    acting: 'self',
    body: { name: 'Delivered again' },
  })
  t.equal(failing.statusCode, 200)
  await until(async () => receiver.deliveries.length === 2, 'the receiver got the second event')
  await until(async () => {
    await page.getByRole('link', { name: 'Audit log' }).click()
    await page.getByTestId('events').waitFor()
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByRole('button', { name: /^Deliveries/ }).click()
    await deliveries.locator('table').waitFor()
    return (await deliveries.locator('tbody tr').count()) === 2
  }, 'the failed attempt listed')
  const failed = await deliveries.locator('tbody tr').first().locator('td').allInnerTexts()
  t.equal(failed[0], receiver.deliveries[1]!.id, 'newest first: the second event')
  t.equal(failed[1], 'sub_account.updated', 'its type')
  t.equal(failed[3], '503', "the receiver's status")
  t.match(failed[4], /503/, 'the error')
  t.match(failed[7], /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/, 'when the next attempt is due')

  // The receiver mended: the failed event sent again at once, from its row.
  receiver.answer(answerOk)
  const failedId = receiver.deliveries[1]!.id
  const buttons = await deliveries.getByRole('button').allInnerTexts()
  t.same([...new Set(buttons)], buttons, `one Send again an event, each named by it: ${buttons.join('; ')}`)
  await deliveries.getByRole('button', { name: `Send again ${failedId}`, exact: true }).click()
  await page.getByTestId('resent').waitFor()
  t.match(
    await page.getByTestId('resent').innerText(),
    new RegExp(`^✓ sub_account.updated ${failedId} queued again \\(attempt 2\\) at \\d\\d:\\d\\d:\\d\\d UTC$`),
    'a visible confirmation',
  )
  await until(async () => receiver.deliveries.filter((d) => d.id === failedId && d.verified).length >= 2, 'sent again')
  const firstRow = () => deliveries.locator('tbody tr').first().locator('td').allInnerTexts()
  const refreshDeliveries = async () => {
    await page.getByRole('link', { name: 'Audit log' }).click()
    await page.getByTestId('events').waitFor()
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByRole('button', { name: /^Deliveries/ }).click()
    await deliveries.locator('table').waitFor()
  }
  await until(async () => {
    await refreshDeliveries()
    const row = await firstRow()
    return row[0] === failedId && row[3] === '200'
  }, 'the resend listed, delivered')
  t.equal((await firstRow())[2], '2', 'as its second attempt')

  // A test send: a webhook_endpoint.test event to this endpoint, signed, listed with its type.
  await page.getByRole('button', { name: `Send test event to ${receiver.url}`, exact: true }).click()
  await page.getByTestId('test-sent').waitFor()
  t.match(await page.getByTestId('test-sent').innerText(), /^✓ Test event evt_\w+ queued for http/, 'confirmed')
  const testType = (d: { verified: unknown }) => (d.verified as { type?: string } | null)?.type
  await until(async () => receiver.deliveries.some((d) => testType(d) === 'webhook_endpoint.test'), 'the test sent')
  const testId = receiver.deliveries.find((d) => testType(d) === 'webhook_endpoint.test')!.id
  t.match(await page.getByTestId('test-sent').innerText(), testId, 'the confirmation names the event delivered')
  await until(async () => {
    await refreshDeliveries()
    const row = await firstRow()
    return row[0] === testId && row[1] === 'webhook_endpoint.test' && row[3] === '200'
  }, 'the test listed')
  t.pass('the test event listed with its type')

  await cardsFit(t, 'endpoints')
  await cardsFit(t, 'deliveries-table')
  await page.getByRole('button', { name: /^Delete/ }).click()
  await page.getByText('No webhook endpoints yet').waitFor()
  t.pass('deleted')
})

t.test('a phone: tables as cards, the sections on one line; the dark theme, axe in it', async (t) => {
  await page.goto(`${gateway.url}/console#/sub-accounts/${subId}`)
  await page.getByTestId('keys').waitFor()
  await cardsFit(t, 'keys')
  await page.getByRole('link', { name: 'Audit log' }).click()
  await page.getByTestId('events').waitFor()
  await cardsFit(t, 'events')
  await page.getByRole('link', { name: 'Sub-accounts' }).click()
  await page.getByTestId('subaccounts').waitFor()
  await cardsFit(t, 'subaccounts')

  // The list's order (the API's sort; test/console/usage-breakdown.test.ts pages it) and its Added column.
  const names = () => page.getByTestId('subaccounts').locator('tbody tr td:first-child').allInnerTexts()
  t.same(await names(), ['Acme EU', 'Delivered again'], 'as listed: oldest first')
  await page.getByLabel('Order').selectOption('-name')
  await until(async () => (await names())[0] === 'Delivered again', 'by name, Z to A')
  await page.getByLabel('Order').selectOption('-created_at')
  await until(async () => (await names())[0] === 'Delivered again', 'newest first')
  await page.getByLabel('Order').selectOption('name')
  await until(async () => (await names())[0] === 'Acme EU', 'by name, A to Z')
  t.match(
    await page.getByTestId('subaccounts').locator('tbody tr').first().locator('td').last().innerText(),
    /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/,
    'when it was created',
  )

  await page.setViewportSize({ width: 390, height: 844 })
  await page.waitForTimeout(100)
  const tops = await page
    .getByRole('navigation', { name: 'Sections' })
    .locator('li')
    .evaluateAll((lis) => lis.map((li) => Math.round(li.getBoundingClientRect().top)))
  t.equal(tops.length, 6, 'six sections')
  t.equal(new Set(tops).size, 1, `the sections on one line at 390 px: ${tops.join(' ')}`)
  await page.setViewportSize({ width: 1280, height: 800 })

  await page.emulateMedia({ colorScheme: 'dark' })
  try {
    const background = await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor)
    t.equal(background, 'rgb(13, 17, 23)', 'dark, from prefers-color-scheme')
    for (const [path, ready, name] of [
      ['/sub-accounts', 'subaccounts', 'subaccounts-dark'],
      [`/sub-accounts/${subId}`, 'keys', 'subaccount-dark'],
      ['/events', 'events', 'events-dark'],
      ['/usage', 'usage-chart', 'usage-dark'],
    ] as const) {
      await page.goto(`${gateway.url}/console#${path}`)
      await page.getByTestId(ready).waitFor()
      const before = findings.length
      await screen(name)
      t.same(
        findings.slice(before).filter((f) => f.impact === 'serious' || f.impact === 'critical'),
        [],
        `axe in the dark theme: ${name}`,
      )
    }
  } finally {
    await page.emulateMedia({ colorScheme: 'light' })
  }
})

t.test('routes: which carry WebSockets, with their bounds, and no upstream address', async (t) => {
  t.notOk((await page.content()).includes(upstream.url.replace(/^http:\/\//, '')), 'no upstream address in the page')
  await page.getByRole('link', { name: 'Routes' }).click()
  await page.getByRole('heading', { name: 'Routes' }).waitFor()
  const rows = await page.getByTestId('routes').locator('tbody tr').allInnerTexts()
  const rowOf = (prefix: string) => rows.find((row) => row.startsWith(prefix)) ?? ''
  t.match(rowOf('/live'), /live:read[\s\S]*live:write/, 'its read and write scopes')
  t.match(
    rowOf('/live'),
    /Yes: up to 7 per tenant and \d+ per parent account, closed after 2 min idle, messages up to 64 KiB/,
    'a WebSocket route, with its bounds',
  )
  t.match(rowOf('/status'), /none \(public\)[\s\S]*No$/, 'a public route, without WebSockets')
  t.match(rowOf('/\t'), /any key[\s\S]*No$/, 'the catch-all: any key, no WebSockets')
  await screen('routes')
})

t.test('a key revoked mid-session: signed out, told why', async (t) => {
  const second = await mintKey(gateway.sql, {
    tenantId: parent.id,
    name: 'console',
    scopes: ['sub_accounts:read', 'sub_accounts:write'],
    withClientSecret: false,
  })
  await page.evaluate(() => sessionStorage.clear())
  await page.goto(`${gateway.url}/console#/sub-accounts`)
  await page.getByLabel('Parent API key').fill(second.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByTestId('subaccounts').waitFor()
  await KEY_COMMANDS['keys revoke']!(
    gateway.sql,
    { account: parent.id, key: second.row.id },
    { redis: { topology: 'server', url: REDIS_URL }, redisKeyPrefix: gateway.redisKeyPrefix } as Config,
    // A command writes only a warning itself (Redis unreachable): shown, as the CLI shows it.
    { stdout: () => {}, stderr: (text) => process.stderr.write(text) },
  )
  // The next call the page makes is refused: moving between screens makes calls.
  await until(async () => {
    if (await page.getByLabel('Parent API key').isVisible()) return true
    await page.evaluate(() => {
      location.hash = location.hash === '#/events' ? '#/sub-accounts' : '#/events'
    })
    await sleep(300)
    return false
  }, 'signed out')
  const text = await alert().innerText()
  t.match(text, /signed out/i)
  t.match(text, /401/)
  t.match(text, /sign in again/i, 'what to do')
  t.equal(await page.evaluate(() => sessionStorage.length), 0, 'the refused key is forgotten')
})

t.test('nothing from another host, no policy violation, no serious or critical axe finding', async (t) => {
  t.same(foreign, [], 'every request went to the gateway')
  t.same(violations, [], 'no Content-Security-Policy violation, no page error')
  const serious = findings.filter((f) => f.impact === 'serious' || f.impact === 'critical')
  t.same(serious, [], 'axe: no serious or critical violation on any screen')
  t.same(
    Object.entries(overflow).filter(([, px]) => px > 0),
    [],
    `no screen scrolls sideways at 390 px: ${JSON.stringify(widest)}`,
  )
})

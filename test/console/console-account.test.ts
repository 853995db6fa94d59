// The console in a real browser (docs/console.md), one account's story: sign-in, the keyboard,
// sub-accounts, keys, limits and details, proxied traffic drawn by the usage chart, a key rolled
// and revoked, every change in the audit log, and the screens on a phone and in the dark theme.
// The bench (gateway, upstream, Chromium, axe): test/helpers/console-session.ts.
import t from 'tap'
import { writeArtifact } from '../helpers/browser.js'
import { sleep } from '../helpers/poll.js'
import { alert, cardsFit, checkNothingForeign, dialogs, findings, gateway } from '../helpers/console-session.js'
import { keepAxeFindings, live, page, parent, screen, until } from '../helpers/console-session.js'

keepAxeFindings('axe.json')

let subId = ''
let mintedKey = ''

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
  for (let i = 0; i < 10; i++) {
    await page.keyboard.press('Tab')
    order.push(await page.evaluate(() => document.activeElement?.textContent?.trim() ?? ''))
  }
  t.same(
    order,
    [
      'Skip to content',
      'Sub-accounts',
      'Plans',
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

  // The expiry's shortcuts fill the field (UTC, as every time the console shows, to the minute), or empty it.
  await page.getByRole('button', { name: 'In 30 days' }).click()
  const offset = await page.evaluate(() => {
    const value = (document.getElementById('mint-expires') as HTMLInputElement).value
    return new Date(`${value}Z`).getTime() - Date.now()
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
  // A key named after Object.prototype's is a key like any other (names are data).
  await page.getByLabel('Key 2', { exact: true }).fill('constructor')
  await page.getByLabel('Value 2', { exact: true }).fill('eu-west')
  await page.getByRole('button', { name: 'Save details' }).click()
  await page.getByTestId('edit-saved').waitFor()
  const saved = await gateway.call(parent.apiKey, { method: 'GET', url: `/v1/sub-accounts/${subId}`, acting: 'self' })
  t.same(saved.json().metadata, { plan: 'pro', constructor: 'eu-west' }, 'the metadata saved as edited')
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
  dialogs.accept = false
  await page.getByRole('button', { name: `Roll ${oldLabel}`, exact: true }).click()
  await until(async () => dialogs.asked.length > 0 && dialogs.asked.at(-1)!.startsWith('Roll'), 'the roll asked first')
  t.match(dialogs.asked.at(-1), `Roll the key ${oldLabel}?`, 'the question names the key by its prefix')
  t.match(dialogs.asked.at(-1), /keeps working for a day/, 'and the overlap')
  await sleep(300)
  t.equal(await page.getByTestId('dialog').count(), 0, 'no roll when the answer is no')
  t.equal(await page.getByTestId('keys').locator('tbody tr').count(), 1, 'still one key')
  dialogs.accept = true

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

// The second sub-account the list below sorts (console-webhooks.test.ts makes it by a delivery).
t.test('a second sub-account, made through the API', async (t) => {
  const made = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'Delivered again' },
  })
  t.equal(made.statusCode, 201, 'created')
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
  t.equal(tops.length, 7, 'seven sections')
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

checkNothingForeign()

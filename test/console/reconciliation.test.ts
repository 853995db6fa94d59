// The console's reconciliation (docs/billing.md) on the Usage screen, in Debian's Chromium against
// a gateway with the real Postgres and a real upstream: per sub-account and meter, the billed units
// beside the limiter, the request log and the export, each difference in words; axe in both
// themes, screenshots at 1280 and 390 pixels (test-artifacts/console/).
import t from 'tap'
import type { Page } from 'playwright-core'
import { axeFindings, launchBrowser, screenshots } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t, (_request, response) => {
  response.writeHead(200, { 'content-type': 'application/json', 'x-tokens-used': '100' })
  response.end('{}')
})
const gateway = await startGateway(t, {
  redis: false,
  usageFlushIntervalMs: 3_600_000,
  gatewayConfig: {
    routes: [{ prefix: '/v1', upstream: upstream.url, cost: 3, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] }],
  },
})
const parent = await gateway.createParent({ name: 'Reconciled parent' })
async function manage(method: string, url: string, body?: unknown): Promise<Record<string, unknown>> {
  const res = await gateway.call(parent.apiKey, { method: method as 'GET', url, acting: 'self', body })
  if (res.statusCode >= 300) throw new Error(`setup ${method} ${url}: ${res.statusCode} ${res.body}`)
  return res.json()
}
// Limited: under a rate it never reaches, so its limiter count shows; free: under none.
const limited = (await manage('POST', '/v1/sub-accounts', {
  name: 'Limited',
  limits: { rate: { requests: 1000, per_seconds: 60 } },
})) as { id: string }
const free = (await manage('POST', '/v1/sub-accounts', { name: 'Free' })) as { id: string }
async function send(acting: string, times: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const res = await fetch(`${gateway.url}/v1/x`, {
      headers: { authorization: `Bearer ${parent.apiKey}`, 'x-service-acting-tenant': acting },
    })
    await res.arrayBuffer()
  }
}
await send(limited.id, 4)
await send(free.id, 2)
await gateway.app.usageMeter.flush()
await gateway.app.requestLog!.flush()

const browser = await launchBrowser(t)
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
const page: Page = await context.newPage()
page.setDefaultTimeout(10_000)
const errors: string[] = []
page.on('pageerror', (err) => errors.push(err.message))

await page.goto(`${gateway.url}/console`)
await page.getByLabel('Parent API key').fill(parent.apiKey)
await page.getByRole('button', { name: 'Sign in' }).click()
await page.getByRole('link', { name: 'Usage' }).click()

t.test('the default range reaches past the log: its count is absent, and said why', async (t) => {
  await page.getByRole('button', { name: 'Reconcile' }).click()
  const table = page.getByTestId('reconciliation')
  await table.waitFor()
  const differences = await table.locator('td[data-label="Differences"]').allInnerTexts()
  // From the month's first day: on its first 7 days (REQUEST_LOG_RETENTION_DAYS) the log holds it all.
  if (new Date().getUTCDate() > 7)
    t.ok(
      differences.every((text) => text.includes('older than the request log holds')),
      differences.join(' | '),
    )
  else
    t.notOk(
      differences.some((text) => text.includes('older than the request log holds')),
      differences.join(' | '),
    )
})

t.test('Reconcile lists each sub-account and meter, its counts and its differences in words', async (t) => {
  // Today only: the request log holds it.
  await page.locator('#reconcile-from').fill(new Date().toISOString().slice(0, 10))
  await page.getByRole('button', { name: 'Reconcile' }).click()
  const table = page.getByTestId('reconciliation')
  const logCells = table.locator('td[data-label="Request log"]')
  t.ok(
    await until(10_000, async () => (await logCells.allInnerTexts()).every((text) => text !== '—')),
    "the log's counts shown",
  )
  t.match(
    await page.getByTestId('reconciliation-summary').innerText(),
    /^4 entries, every difference explained$/,
    'two sub-accounts, two meters each, nothing unexplained',
  )
  const row = (id: string, meter: string) =>
    table.locator('tbody tr', { has: page.locator(`a[href="#/sub-accounts/${id}"]`) }).filter({ hasText: meter })
  const cells = async (id: string, meter: string) =>
    Object.fromEntries(
      await row(id, meter)
        .locator('td')
        .evaluateAll((tds) => tds.map((td) => [td.getAttribute('data-label'), (td as HTMLElement).innerText.trim()])),
    )
  t.match(await cells(limited.id, 'requests'), {
    Billed: '12',
    Limiter: '12',
    'Request log': '12',
    Exported: '0',
    Differences: 'Export: 12 units in periods still open',
  })
  t.equal(await row(limited.id, 'requests').locator('a').innerText(), 'Limited', 'named, a link to its page')
  t.match(await cells(free.id, 'tokens'), {
    Billed: '200',
    Limiter: '—',
    'Request log': '200',
    Differences: 'Export: 200 units in periods still open',
  })
  t.equal(await page.locator('li.bad').count(), 0, 'nothing flagged')
})

t.test('axe: no findings, light and dark; no sideways scroll at 390 px; no page error', async (t) => {
  const findings: string[] = []
  for (const scheme of ['light', 'dark'] as const) {
    await page.emulateMedia({ colorScheme: scheme })
    const found = await axeFindings(page, 'reconciliation')
    findings.push(...found.map((f) => `${scheme}: ${f.id} ${f.help}`))
    const shot = await screenshots(page, scheme === 'light' ? 'reconciliation' : 'reconciliation-dark')
    if (shot.overflowAt390 > 0) findings.push(`${scheme}: scrolls sideways at 390 px: ${shot.widest}`)
  }
  t.same(findings, [])
  t.same(errors, [])
})

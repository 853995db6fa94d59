// The console's key list (docs/console.md; docs/key-imports.md; docs/secret-scanning.md) in a real
// browser against a gateway with the real Postgres and Redis: a key imported from elsewhere shows
// as imported, and a key reported leaked shows when and where, beside one minted here.
import { randomBytes } from 'node:crypto'
import t from 'tap'
import type { Page } from 'playwright-core'
import { launchBrowser, watchPage } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'

const gateway = await startGateway(t)
const parent = await gateway.createParent({ name: 'Keys parent' })
const call = async (method: 'GET' | 'POST', url: string, body?: unknown) => {
  const res = await gateway.call(parent.apiKey, { method, url: `/v1/sub-accounts${url}`, acting: 'self', body })
  if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`)
  return res.json()
}

const sub = await call('POST', '', { name: 'Acme' })
const minted = await call('POST', `/${sub.id}/api-keys`, { name: 'minted', scopes: ['orders:read'] })
const imported = await callAs(gateway.url, parent.apiKey, {
  method: 'POST',
  path: '/v1/sub-accounts/api-keys/imports',
  acting: 'self',
  headers: [['Content-Type', 'application/x-ndjson']],
  body: `${JSON.stringify({ sub_account_id: sub.id, name: 'from kong', scopes: ['orders:read'], key: `kong-${randomBytes(16).toString('hex')}` })}\n`,
})
if (imported.status !== 200) throw new Error(`import: ${imported.status} ${imported.body}`)
await call('POST', '/api-keys/leaks', { key: minted.api_key })

const browser = await launchBrowser(t)
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
const page: Page = await context.newPage()
page.setDefaultTimeout(10_000)
const { foreign, violations } = watchPage(page, gateway.url)

t.test('imported and leaked keys say so in their status', async (t) => {
  await page.goto(`${gateway.url}/console`)
  await page.getByLabel('Parent API key').fill(parent.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  await page.goto(`${gateway.url}/console#/sub-accounts/${sub.id}`)
  const rowOf = (name: string) =>
    page.getByTestId('keys').locator('tbody tr', { has: page.locator('td:first-child', { hasText: name }) })
  const statusOf = (name: string) => rowOf(name).getByTestId('key-status').innerText()
  const shown = await eventually(10_000, async () => (await rowOf('from kong').count()) === 1, 100)
  t.not(shown, null, 'the imported key listed')
  t.match(await statusOf('from kong'), /active\s+imported/, 'imported')
  t.match(await rowOf('from kong').innerText(), /kong…/, 'its first four characters')
  t.match(
    await statusOf('minted'),
    /revoked[\s\S]*leaked \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(parent\)/,
    'leaked: when, and who reported it',
  )
  t.same(foreign, [], 'nothing fetched from elsewhere')
  t.same(violations, [], 'no policy violation')
})

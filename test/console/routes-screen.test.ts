// The console's Routes screen in Chromium (docs/console.md): each route's targets and their state
// from GET /v1/sub-accounts/routes, over real upstreams on loopback (a target that refuses
// connections ejected once a request failed on it, on Refresh; one failing its health checks, alone
// on its route, which is then in panic), a route with one upstream, and which other origins' pages
// may call a route; never an upstream's address; axe finds nothing, and no page error.
import { createServer } from 'node:http'
import type { Page } from 'playwright-core'
import t from 'tap'
import { axeFindings, launchBrowser, screenshots } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { listenOnLoopback, REFUSED_URL, startUpstream } from '../helpers/upstream.js'

const good = await startUpstream(t)
const sick = createServer((request, response) => {
  response.writeHead(request.url === '/healthz' ? 500 : 200).end()
})
const sickUrl = `http://127.0.0.1:${(await listenOnLoopback(t, sick)).port}`

const gateway = await startGateway(t, {
  // Forward authorization on: every route is decided for too, one only.
  authz: true,
  gatewayConfig: {
    routes: [
      {
        prefix: '/v1/balanced',
        targets: [{ url: good.url, weight: 2 }, { url: REFUSED_URL }],
        balance: 'round_robin',
        outlier: { eject_after: 1, max_ejected_percent: 50 },
      },
      {
        prefix: '/v1/checked',
        targets: [{ url: sickUrl }],
        health_check: { path: '/healthz', interval_ms: 1000, timeout_ms: 500, healthy_after: 1, unhealthy_after: 1 },
      },
      { prefix: '/v1/browser', upstream: good.url, cors: { origins: ['https://app.example.com'] } },
      { prefix: '/v1/anyone', upstream: good.url, cors: { origins: ['*'] } },
      { prefix: '/v1/decided', scopes: { read: ['things:read'] } },
      { prefix: '/v1/celled', cells: { eu: { targets: [{ url: good.url }] } }, default_cell: 'eu' },
    ],
  },
})
const parent = await gateway.createParent({ name: 'Routes parent' })

const browser = await launchBrowser(t)
const page: Page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
page.setDefaultTimeout(20_000)
const errors: string[] = []
page.on('pageerror', (err) => errors.push(err.message))
await page.goto(`${gateway.url}/console`)
await page.getByLabel('Parent API key').fill(parent.apiKey)
await page.getByRole('button', { name: 'Sign in' }).click()
await page.getByRole('link', { name: 'Sub-accounts' }).first().waitFor()

const rowOf = (prefix: string) => page.getByTestId('routes').locator('tbody tr', { hasText: prefix })

t.test("each route's targets, their state, and who may call it from a browser", async (t) => {
  await page.getByRole('link', { name: 'Routes' }).click()
  await page.getByRole('heading', { name: 'Routes' }).waitFor()
  await page.getByTestId('targets /v1/balanced').waitFor()
  t.match(
    await rowOf('/v1/balanced').innerText(),
    /Target 1 \(weight 2\): up\s+Target 2 \(weight 1\): up\s+Balanced by round robin/,
    'both targets up at first',
  )
  t.match(await rowOf('/v1/browser').innerText(), /Pages of https:\/\/app\.example\.com\s+One upstream \(not watched\)/)
  t.match(await rowOf('/v1/anyone').innerText(), /Pages of any origin/)
  t.match(await rowOf('/v1/balanced').innerText(), /Same origin only/, 'a route without cors')
  t.match(await rowOf('/v1/decided').innerText(), /Decided for a proxy in front only/, 'a route only decided for')
  t.match(
    await rowOf('/v1/browser').innerText(),
    /Also decided for a proxy in front/,
    'AUTHZ_PORT set: also decided for',
  )
  await page.getByTestId('targets /v1/celled').waitFor()
  t.match(
    await rowOf('/v1/celled').innerText(),
    /eu[\s\S]*Target 1 \(weight 1\): up/,
    "a cell's targets under its name",
  )

  // A request round robin sends to the refusing target first (it is retried on the other).
  const target2 = rowOf('/v1/balanced').locator('li[data-state]').nth(1)
  let ejected = false
  for (let i = 0; i < 20 && !ejected; i++) {
    await gateway.call(parent.apiKey, { method: 'GET', url: '/v1/balanced/x', acting: 'self' })
    await page.getByRole('button', { name: "Refresh the targets' state" }).click()
    await page.getByRole('button', { name: "Refresh the targets' state" }).and(page.locator(':enabled')).waitFor()
    ejected = (await target2.getAttribute('data-state')) === 'ejected'
  }
  t.ok(ejected, 'the refusing target shown ejected, on Refresh')
  t.match(await target2.innerText(), /Target 2 \(weight 1\): ejected/)
  t.equal(await rowOf('/v1/balanced').getByTestId('panic').count(), 0, 'one target still up: no panic')

  await page.waitForFunction(
    async () => {
      const button = [...document.querySelectorAll('button')].find((b) => b.textContent?.startsWith('Refresh'))
      button?.click()
      await new Promise((resolve) => setTimeout(resolve, 200))
      return document.querySelector('[data-testid="targets /v1/checked"] li[data-state="failing_checks"]') !== null
    },
    null,
    { timeout: 20_000, polling: 500 },
  )
  t.match(
    await rowOf('/v1/checked').innerText(),
    /Panic every target is out, so requests go to all of them\.\s+Target 1 \(weight 1\): failing its health checks/,
    'failing its checks, and the route in panic',
  )
  const text = await page.content()
  for (const url of [good.url, sickUrl, REFUSED_URL])
    t.notOk(text.includes(url.replace(/^http:\/\//, '')), `no upstream address (${url})`)
  const { overflowAt390, widest } = await screenshots(page, 'routes-targets')
  t.equal(overflowAt390, 0, `nothing scrolls sideways at 390 px ${widest.join(', ')}`)
  t.same(await axeFindings(page, 'routes-targets'), [], 'axe finds nothing')
  t.same(errors, [], 'no page errors')
})

// The console's request details with tracing on (docs/console.md): a record's trace id, linked to
// its trace through TRACE_URL_TEMPLATE, in a real browser against a gateway exporting to a
// collector of the test's own.
import t from 'tap'
import type { Page } from 'playwright-core'
import { launchBrowser } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { startCollector } from '../helpers/otlp-collector.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const collector = await startCollector(t)
const gateway = await startGateway(t, {
  gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
  requestLog: { flushIntervalMs: 100 },
  env: {
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    TRACE_URL_TEMPLATE: 'https://grafana.example/explore?trace={trace_id}',
  },
})
const parent = await gateway.createParent({ name: 'Traced parent' })
const TRACE = '5af7651916cd43dd8448eb211c80319c'

t.test("a record's details link its trace", async (t) => {
  const sent = await fetch(`${gateway.url}/api/orders/1`, {
    headers: { authorization: `Bearer ${parent.apiKey}`, traceparent: `00-${TRACE}-b7ad6b7169203331-01` },
  })
  await sent.arrayBuffer()
  t.equal(sent.status, 200)
  const written = await eventually(10_000, async () => {
    const page = await gateway.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts/requests', acting: 'self' })
    return (page.json() as { data: { trace_id?: string }[] }).data.some((r) => r.trace_id === TRACE)
  })
  t.not(written, null, 'the record is written, with its trace id')

  const browser = await launchBrowser(t)
  const page: Page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
  page.setDefaultTimeout(10_000)
  await page.goto(`${gateway.url}/console`)
  await page.getByLabel('Parent API key').fill(parent.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  await page.goto(`${gateway.url}/console#/requests`)
  const row = page.getByTestId('requests').locator('tbody tr').filter({ hasText: '/api/orders/1' }).first()
  await row.getByRole('button').click()
  const details = page.getByTestId('request-details')
  await details.waitFor()
  const link = details.getByRole('link', { name: TRACE })
  t.equal(
    await link.getAttribute('href'),
    `https://grafana.example/explore?trace=${TRACE}`,
    'the trace id links to its trace',
  )
  t.equal(await link.getAttribute('rel'), 'noreferrer')
})

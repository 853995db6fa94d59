// The Routes screen in a real browser (docs/console.md): the proxied routes as the page lists them,
// a WebSocket route told apart with its bounds, no upstream address anywhere in the page, nothing
// run inline (the policy refuses nothing), and axe-core finds nothing.
import t from 'tap'
import { CONSOLE_ROUTES_ELEMENT, routesForScript } from '../../src/console/route-list.js'
import { axeFindings, launchBrowser, screenshots } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { startUpstream } from '../helpers/upstream.js'

t.test('the list is JSON a script element cannot end early', async (t) => {
  const hostile = [
    {
      prefix: '/a</script><script>alert(1)</script><!--',
      public: false,
      scopes: { read: [], write: [] },
      websocket: null,
    },
  ]
  const text = routesForScript(hostile)
  t.notMatch(text, /</, 'no < at all')
  t.same(JSON.parse(text), hostile, 'and it reads back the same')
})

t.test('the Routes screen', async (t) => {
  const upstream = await startUpstream(t, (_request, response) => response.end('{}'))
  const gateway = await startGateway(t, {
    gatewayConfig: {
      routes: [
        {
          prefix: '/v1/live',
          upstream: upstream.url,
          scopes: { read: ['live:read'], write: ['live:write'] },
          websocket: true,
          max_websockets_per_tenant: 7,
          websocket_idle_timeout_ms: 120_000,
          websocket_max_message_bytes: 65_536,
        },
        {
          prefix: '/v1/orders',
          upstream: `${upstream.url}/internal-base`,
          scopes: { read: ['orders:read'], write: [] },
        },
        { prefix: '/status', upstream: upstream.url, public: true },
      ],
    },
  })
  const parent = await gateway.createParent({ name: 'Routes parent' })
  const browser = await launchBrowser(t)
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
  page.setDefaultTimeout(10_000)
  const violations: string[] = []
  page.on('console', (message) => {
    if (/Content.Security.Policy|Refused to/i.test(message.text())) violations.push(message.text())
  })
  page.on('pageerror', (err) => violations.push(`page error: ${err.message}`))

  await page.goto(`${gateway.url}/console`)
  const html = await page.content()
  t.notOk(html.includes(upstream.url.replace(/^http:\/\//, '')), 'no upstream address in the page')
  t.ok(await page.locator(`script#${CONSOLE_ROUTES_ELEMENT}[type="application/json"]`).count(), 'the data block')

  await page.getByLabel('Parent API key').fill(parent.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  await page.getByRole('link', { name: 'Routes' }).click()
  await page.getByRole('heading', { name: 'Routes' }).waitFor()

  const rows = await page.getByTestId('routes').locator('tbody tr').allInnerTexts()
  const rowOf = (prefix: string) => rows.find((row) => row.startsWith(prefix)) ?? ''
  t.match(rowOf('/v1/live'), /live:read/, 'read scopes')
  t.match(rowOf('/v1/live'), /live:write/, 'write scopes')
  t.match(
    rowOf('/v1/live'),
    /Yes: up to 7 per tenant, closed after 2 min idle, messages up to 64 KiB/,
    'a WebSocket route, with its bounds',
  )
  t.match(rowOf('/v1/orders'), /orders:read[\s\S]*any key[\s\S]*No$/, 'a route without WebSockets')
  t.match(rowOf('/status'), /none \(public\)/, 'a public route needs no key')
  t.same(violations, [], 'the policy refused nothing and the page threw nothing')
  t.same(await axeFindings(page, 'routes'), [], 'axe-core finds nothing')
  const shot = await screenshots(page, 'routes')
  t.equal(shot.overflowAt390, 0, `nothing overflows at 390 px: ${shot.widest.join(', ')}`)
})

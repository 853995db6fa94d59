// The console against hostile or odd input (docs/console.md, Security model): API strings made of
// markup never run (and Trusted Types refuse HTML sinks), one-time secrets and the signed-out key
// are gone from the page's memory (a heap snapshot), odd addresses and unexpected answers show a
// message (never a blank page), a late answer never replaces a newer one, every error code has
// advice of its own, a paste that is no key is said so, and the longest strings fit 390 pixels.
import t from 'tap'
import type { CDPSession, Page } from 'playwright-core'
import { ERRORS, type ErrorCode } from '../../src/errors.js'
import { launchBrowser, screenshots } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'

const gateway = await startGateway(t, { env: { WEBHOOKS_ALLOW_INSECURE: 'true' } })
const parent = await gateway.createParent({ name: 'Hostile parent' })
const browser = await launchBrowser(t)
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
const page: Page = await context.newPage()
page.setDefaultTimeout(10_000)

const errors: string[] = []
const requests: string[] = []
page.on('pageerror', (err) => errors.push(err.message))
page.on('request', (request) => requests.push(request.url()))
page.on('dialog', (dialog) => void dialog.accept())

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  if ((await eventually(10_000, check, 100)) === null) throw new Error(`never: ${what}`)
}

async function signIn(key = parent.apiKey) {
  await page.goto(`${gateway.url}/console`)
  await page.getByLabel('Parent API key').fill(key)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
}

/** Markup that would run, or leave an element, if any of it were parsed as HTML. */
const MARKUP = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
const ran = () => page.evaluate(() => (window as { __xss?: number }).__xss ?? null)
const injected = () => page.locator('img[src="x"], main script').count()

t.test('markup in every string the API returns is shown as text, never run', async (t) => {
  const created = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: MARKUP, external_id: 'x/../b:@+', metadata: { note: MARKUP } },
  })
  t.equal(created.statusCode, 201, 'created')
  const sub = created.json() as { id: string }
  const minted = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${sub.id}/api-keys`,
    acting: 'self',
    body: { name: MARKUP, scopes: ['tracking:read'] },
  })
  t.equal(minted.statusCode, 201, 'minted')
  const hook = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts/webhook-endpoints',
    acting: 'self',
    body: {
      url: 'http://127.0.0.1:9/"><img src=x onerror=window.__xss=4>',
      event_types: ['api_key.*'],
      description: MARKUP,
    },
  })
  t.equal(hook.statusCode, 201, 'hook')

  await signIn()
  await page.getByTestId('subaccounts').waitFor()
  t.match(await page.getByTestId('subaccounts').innerText(), MARKUP, 'the name, as text, in the list')
  await page.getByRole('link', { name: MARKUP }).click()
  await page.getByTestId('keys').waitFor()
  t.match(await page.getByTestId('keys').innerText(), MARKUP, "the key's name, as text")
  t.equal(await page.getByLabel('Key 1', { exact: true }).inputValue(), 'note', "the metadata's key")
  t.equal(await page.getByLabel('Value 1', { exact: true }).inputValue(), MARKUP, 'its value, as text')

  await page.getByRole('link', { name: 'Audit log' }).click()
  await page.getByTestId('events').waitFor()
  for (const details of await page.locator('details').all()) await details.click()
  t.match(await page.getByTestId('events').innerText(), 'onerror', 'the events show the targets as text')
  // An event's data, a field a row and as JSON, in its dialog: text too.
  await page
    .getByTestId('events')
    .getByRole('button', { name: /^Data of sub_account\.created/ })
    .first()
    .click()
  const data = page.getByTestId('event-data')
  await data.getByText('The event as JSON').click()
  t.match(await data.innerText(), /onerror[\s\S]*"name": ".*onerror/, 'the data, a field a row and as JSON, as text')
  await page.keyboard.press('Escape')
  await data.waitFor({ state: 'detached' })
  await page.getByRole('link', { name: 'Webhooks' }).click()
  await page.getByTestId('endpoints').waitFor()
  t.match(await page.getByTestId('endpoints').innerText(), 'onerror=window.__xss=4', 'the URL, as text')
  t.match(
    await page.getByTestId('endpoints').locator('.description').innerText(),
    MARKUP,
    'its description, as text, under it',
  )
  t.equal(await page.getByTestId('endpoints').locator('a').count(), 0, 'a webhook URL is never a link')
  await page.getByRole('button', { name: /^Deliveries/ }).click()
  await page.getByTestId('deliveries').locator('.empty, table, .error').first().waitFor()

  const sink = await page.evaluate(() => {
    try {
      document.body.insertAdjacentHTML('beforeend', '<img src=x>')
      return 'accepted'
    } catch (err) {
      return String(err)
    }
  })
  t.match(sink, /TrustedHTML/, 'an HTML sink refuses a string (Trusted Types)')
  t.equal(await ran(), null, 'no markup ran')
  t.equal(await injected(), 0, 'no element made from a string')
  t.same(errors, [], 'no page error')
})

/** Every string of the page's JavaScript heap that holds `secret`, after a garbage collection. */
async function inHeap(cdp: CDPSession, secret: string): Promise<boolean> {
  await cdp.send('HeapProfiler.enable')
  await cdp.send('HeapProfiler.collectGarbage')
  let snapshot = ''
  const onChunk = (chunk: { chunk: string }) => {
    snapshot += chunk.chunk
  }
  cdp.on('HeapProfiler.addHeapSnapshotChunk', onChunk)
  await cdp.send('HeapProfiler.takeHeapSnapshot', { reportProgress: false })
  cdp.off('HeapProfiler.addHeapSnapshotChunk', onChunk)
  await cdp.send('HeapProfiler.disable')
  return snapshot.includes(secret)
}

t.test('a minted key and a webhook secret are gone from the page and its memory once closed', async (t) => {
  const cdp = await context.newCDPSession(page)
  const created = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'Secrets' },
  })
  const sub = created.json() as { id: string }
  await page.goto(`${gateway.url}/console#/sub-accounts/${sub.id}`)
  await page.getByTestId('keys').or(page.getByText('No keys yet')).first().waitFor()
  await page.getByLabel('Name', { exact: true }).last().fill('once')
  await page.getByLabel(/^Scopes/).fill('tracking:read')
  await page.getByRole('button', { name: 'Mint key' }).click()
  await page.getByTestId('dialog').waitFor()
  const key = await page.getByLabel('API key', { exact: true }).inputValue()
  const clientSecret = await page.getByLabel('Client secret', { exact: true }).inputValue()
  t.ok(await inHeap(cdp, key), 'the key is in memory while its dialog is open (the check sees it)')
  await page.keyboard.press('Escape')
  await page.getByTestId('dialog').waitFor({ state: 'detached' })
  t.notOk(await inHeap(cdp, key), 'the key is nowhere in memory after the dialog closes')
  t.notOk(await inHeap(cdp, clientSecret), 'nor its client secret')

  await page.getByRole('button', { name: /^Roll/ }).first().click()
  await page.getByTestId('dialog').waitFor()
  const rolled = await page.getByLabel('API key', { exact: true }).inputValue()
  await page.getByRole('button', { name: 'Close' }).click()
  await page.getByTestId('dialog').waitFor({ state: 'detached' })
  t.notOk(await inHeap(cdp, rolled), 'a rolled key neither')

  await page.getByRole('link', { name: 'Webhooks' }).click()
  await page.getByTestId('endpoints').waitFor()
  await page.getByLabel('URL (https)').fill('http://127.0.0.1:9/secret-test')
  await page.getByLabel('Every api_key event (api_key.*)').check()
  await page.getByRole('button', { name: 'Create endpoint' }).click()
  await page.getByTestId('dialog').waitFor()
  const secret = await page.getByLabel('Signing secret').inputValue()
  await page.getByRole('button', { name: 'Close' }).click()
  await page.getByTestId('dialog').waitFor({ state: 'detached' })
  t.notOk(await inHeap(cdp, secret.slice('whsec_'.length)), 'a webhook secret neither')

  // sessionStorage is the browser's, outside the JavaScript heap: the key is found only where the
  // page's own objects hold it (the sign-in form's state did, until the next sign-in).
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByLabel('Parent API key').waitFor()
  t.equal(await page.evaluate(() => sessionStorage.length), 0, 'sign out forgets it')
  t.notOk(await inHeap(cdp, parent.apiKey), 'and nothing in the page holds it any more')
  await page.getByLabel('Parent API key').fill(parent.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('navigation', { name: 'Sections' }).waitFor()
  t.same(errors, [], 'no page error')
})

t.test('an odd sub-account route: a message, not a blank page, and no call outside the API', async (t) => {
  for (const odd of ['%E0%A4%A', '..', '%2e%2E', '.']) {
    requests.length = 0
    await page.goto(`${gateway.url}/console#/sub-accounts/${odd}`)
    await page.getByRole('alert').waitFor()
    t.match(await page.getByRole('alert').innerText(), /not_found|no such/i, `#/sub-accounts/${odd}: said`)
    t.ok(await page.getByRole('navigation', { name: 'Sections' }).isVisible(), 'the console is still there')
    const api = requests.filter((url) => url.includes('/v1/'))
    t.same(
      api.filter((url) => !url.startsWith(`${gateway.url}/v1/sub-accounts`)),
      [],
      'every call is to the management API',
    )
  }
  t.same(errors, [], 'no page error')
})

t.test('an answer the console does not expect: a message, not a blank page', async (t) => {
  await page.route('**/v1/sub-accounts/events*', (route) =>
    route.fulfill({
      contentType: 'application/json',
      body: JSON.stringify({ data: [{ id: 'evt_1', type: 'odd', target: null, actor: null }], next_cursor: null }),
    }),
  )
  await page.goto(`${gateway.url}/console#/events`)
  await page.getByRole('alert').waitFor()
  t.match(await page.getByRole('alert').innerText(), /console failed/i, 'said')
  t.ok(await page.getByRole('navigation', { name: 'Sections' }).isVisible(), 'the console is still there')
  await page.unroute('**/v1/sub-accounts/events*')
  await page.getByRole('link', { name: 'Sub-accounts' }).click()
  await page.getByTestId('subaccounts').waitFor()
  t.pass('another screen works')
  errors.length = 0
})

t.test('a slow answer to an older filter never replaces the newer one', async (t) => {
  for (const name of ['Old one', 'Old two']) {
    const made = await gateway.call(parent.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      acting: 'self',
      body: { name },
    })
    const id = (made.json() as { id: string }).id
    await gateway.call(parent.apiKey, { method: 'POST', url: `/v1/sub-accounts/${id}/deactivate`, acting: 'self' })
  }
  // The deactivated list answers late: the user has picked "Active" by then.
  await page.route(/\/v1\/sub-accounts\?.*status=deactivated/, async (route) => {
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    await route.continue().catch(() => {})
  })
  await page.goto(`${gateway.url}/console#/sub-accounts`)
  await page.getByTestId('subaccounts').waitFor()
  await page.getByLabel('Status').selectOption('deactivated')
  await page.getByLabel('Status').selectOption('active')
  await until(async () => (await page.getByTestId('live').innerText()).includes(' shown, '), 'the active list')
  await new Promise((resolve) => setTimeout(resolve, 2_500))
  const statuses = await page.getByTestId('subaccounts').locator('.badge').allInnerTexts()
  t.ok(statuses.length > 0, 'a list shown')
  t.same([...new Set(statuses)], ['active'], 'the list is the filter shown: active only')
  t.equal(await page.getByLabel('Status').inputValue(), 'active')
  await page.unroute(/\/v1\/sub-accounts\?.*status=deactivated/)

  // On a sub-account's page, a slow read of the previous one never takes the place of the next.
  const ids = await page
    .getByTestId('subaccounts')
    .getByRole('link')
    .evaluateAll((links) => links.map((a) => a.getAttribute('href')!.replace('#/sub-accounts/', '')))
  const [slow, fast] = ids as [string, string]
  await page.route(`**/v1/sub-accounts/${slow}`, async (route) => {
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    await route.continue().catch(() => {})
  })
  await page.goto(`${gateway.url}/console#/sub-accounts/${slow}`)
  await page.evaluate((id) => {
    location.hash = `#/sub-accounts/${id}`
  }, fast)
  await page.getByTestId('sub-status').waitFor()
  await new Promise((resolve) => setTimeout(resolve, 2_500))
  t.equal(await page.getByTestId('sub-id').innerText(), fast, 'the page shows the sub-account it names')
  await page.unroute(`**/v1/sub-accounts/${slow}`)
  t.same(errors, [], 'no page error')
})

t.test('every error code of the API comes with advice of its own', async (t) => {
  // What the fallbacks say: right for input the user can correct, wrong for anything else.
  const generic = /^(Check what you entered and try again\.|This key may not do that)/
  const inputErrors = new Set<ErrorCode>(['bad_request', 'bad_path', 'unsupported_media_type'])
  let answer = { status: 0, code: '' }
  await page.route('**/v1/sub-accounts/events*', (route) =>
    route.fulfill({
      status: answer.status,
      contentType: 'application/problem+json',
      body: JSON.stringify({ ...answer, title: 'T', detail: 'the detail', request_id: 'rid-1' }),
    }),
  )
  for (const [code, { status }] of Object.entries(ERRORS) as [ErrorCode, { status: number }][]) {
    answer = { status, code }
    await page.goto(`${gateway.url}/console#/sub-accounts`)
    await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
    await page.getByRole('link', { name: 'Audit log' }).click()
    if (status === 401) {
      // An expired or unknown key: signed out, told why and what to do.
      await page.getByLabel('Parent API key').waitFor()
      const told = await page.getByRole('alert').innerText()
      t.match(told, new RegExp(`signed out[\\s\\S]*401 ${code}[\\s\\S]*sign in again`, 'i'), `${code}: signed out`)
      t.equal(await page.evaluate(() => sessionStorage.length), 0, `${code}: the key forgotten`)
      await page.evaluate(() => {
        location.hash = '#/sub-accounts' // not back to the screen that is refused
      })
      await page.getByLabel('Parent API key').fill(parent.apiKey)
      await page.getByRole('button', { name: 'Sign in' }).click()
      await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
      continue
    }
    const shown = page.locator(`.error[data-code="${code}"]`)
    await shown.waitFor()
    const text = await shown.innerText()
    t.match(
      text,
      new RegExp(`${status} ${code}[\\s\\S]*the detail[\\s\\S]*rid-1`),
      `${code}: status, code, detail, request id`,
    )
    const advice = await shown.locator('.error-advice').innerText()
    if (!inputErrors.has(code)) t.notMatch(advice, generic, `${code}: ${advice}`)
  }
  await page.unroute('**/v1/sub-accounts/events*')

  // No answer at all: the gateway down, or the network.
  await page.route('**/v1/sub-accounts/events*', (route) => route.abort('connectionrefused'))
  await page.goto(`${gateway.url}/console#/sub-accounts`)
  await page.getByRole('link', { name: 'Audit log' }).click()
  await page.locator('.error[data-code="network"]').waitFor()
  t.match(await page.getByRole('alert').innerText(), /did not answer[\s\S]*Check that the gateway is running/)
  await page.unroute('**/v1/sub-accounts/events*')
  t.same(errors, [], 'no page error')
})

t.test('the longest name, external id, key name and URL the API takes fit 390 pixels', async (t) => {
  const created = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'N'.repeat(200), external_id: 'e'.repeat(128), metadata: { ['k'.repeat(40)]: 'v'.repeat(200) } },
  })
  t.equal(created.statusCode, 201, 'created')
  const id = (created.json() as { id: string }).id
  const minted = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${id}/api-keys`,
    acting: 'self',
    body: { name: 'K'.repeat(200), scopes: ['tracking:read'] },
  })
  t.equal(minted.statusCode, 201, 'minted')
  const hook = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts/webhook-endpoints',
    acting: 'self',
    body: { url: `http://127.0.0.1:9/${'u'.repeat(400)}`, event_types: ['api_key.*'] },
  })
  t.equal(hook.statusCode, 201, 'hook')
  const overflow: Record<string, unknown> = {}
  for (const [screen, hash] of [
    ['long-subaccounts', '#/sub-accounts'],
    ['long-subaccount', `#/sub-accounts/${id}`],
    ['long-webhooks', '#/webhooks'],
  ] as const) {
    await page.goto(`${gateway.url}/console${hash}`)
    await page.locator('table').first().waitFor()
    if (screen === 'long-webhooks') {
      await page
        .getByRole('button', { name: /^Deliveries/ })
        .last()
        .click()
      await page.getByTestId('deliveries').locator('.empty, table').first().waitFor()
    }
    const shot = await screenshots(page, screen)
    if (shot.overflowAt390 > 0) overflow[screen] = shot.widest
  }
  t.same(overflow, {}, 'nothing scrolls the page sideways at 390 px')
})

t.test('a key pasted with characters no header can carry is said to be no key', async (t) => {
  await page.evaluate(() => sessionStorage.clear())
  await page.goto(`${gateway.url}/console`)
  for (const pasted of ['tgw_…', `tgw_${'A'.repeat(20)} ${'A'.repeat(29)}`, 'tgw_\u200bAAAA']) {
    await page.getByLabel('Parent API key').fill(pasted)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('alert').waitFor()
    const text = await page.getByRole('alert').innerText()
    t.match(text, /not a key[\s\S]*paste it alone/i, `${JSON.stringify(pasted)}: said`)
    t.notMatch(text, /did not answer/, 'not blamed on the gateway')
    t.equal(await page.evaluate(() => sessionStorage.length), 0, 'nothing kept')
  }
  t.same(errors, [], 'no page error')
})

t.test('a read refused by the management rate says what happened and what to do', async (t) => {
  const limited = await startGateway(t, { env: { MANAGEMENT_RATE: '2/60s' } })
  const other = await limited.createParent({ name: 'Limited' })
  await page.evaluate(() => sessionStorage.clear())
  await page.goto(`${limited.url}/console`)
  await page.getByLabel('Parent API key').fill(other.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  await page.getByRole('link', { name: 'Audit log' }).click()
  await page.getByRole('alert').waitFor()
  const text = await page.getByRole('alert').innerText()
  t.match(text, /429/, 'the status')
  t.match(text, /rate_limited/, 'the code')
  t.match(text, /wait/i, 'what to do')
  await until(async () => (await page.getByTestId('live').innerText()).startsWith('Failed'), 'announced')
  t.same(errors, [], 'no page error')
})

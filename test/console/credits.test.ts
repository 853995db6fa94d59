// Prepaid credits in a real browser (docs/console.md, docs/portal.md), against a gateway with the
// real Postgres and Redis and an upstream that reports tokens, the grants made through the API and
// burned by real traffic: the console's Credits screen of a sub-account (its balance and credit
// limit, a burn-down chart drawn from GET …/credits/history, the grants in burn order, a grant and
// a void made there, a refusal beside its field), and the portal's Credits screen (the customer's
// balance and grants, read-only, never another sub-account's, without the parent's metadata, and
// refused without usage:read). CSP, axe-core and the 390 px width, as the other console tests.
import t from 'tap'
import type { Page } from 'playwright-core'
import {
  type AxeFinding,
  axeFindings,
  launchBrowser,
  PORTAL_ARTIFACTS,
  screenshots,
  watchPage,
} from '../helpers/browser.js'
import { managementAs, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { UNHURRIED_LIMITS } from '../helpers/limits.js'
import { reportsTokens, startUpstream } from '../helpers/upstream.js'

const HOUR = 3_600_000
const upstream = await startUpstream(t, reportsTokens)
const gateway = await startGateway(t, {
  ...UNHURRIED_LIMITS,
  usageFlushIntervalMs: HOUR,
  gatewayConfig: {
    routes: [{ prefix: '/llm', upstream: upstream.url, meters: [{ name: 'tokens', header: 'x-tokens-used' }] }],
  },
})
const parent = await gateway.createParent({ name: 'Credits parent' })
const manage = managementAs(gateway, parent.apiKey)

// A plan with a monthly quota and a required credit; Acme on it, Globex beside it with its own grant.
const plan = await manage('POST', '/plans', {
  name: 'Prepaid',
  limits: { monthly_quota: { requests: 1000 }, credits: { tokens: { required: true } } },
})
const acme = (await manage('POST', '', { name: 'Acme', plan_id: plan.id })).id as string
const globex = (await manage('POST', '', { name: 'Globex', plan_id: plan.id })).id as string
await manage('POST', `/${acme}/credits/grants`, {
  meter: 'tokens',
  units: 1000,
  metadata: { invoice: 'in_acme_1' },
})
for (const tokens of [120, 180]) {
  const res = await callAs(gateway.url, parent.apiKey, { path: `/llm/chat?tokens=${tokens}`, acting: acme })
  if (res.status !== 200) throw new Error(`traffic: ${res.status} ${res.body}`)
}
await gateway.app.usageMeter.flush()
const topUp = await manage('POST', `/${acme}/credits/grants`, { meter: 'tokens', units: 500, priority: 50 })
const spare = await manage('POST', `/${acme}/credits/grants`, { meter: 'tokens', units: 40 })
await manage('POST', `/${acme}/credits/grants/${spare.id}/void`)
const theirs = await manage('POST', `/${globex}/credits/grants`, {
  meter: 'tokens',
  units: 9000,
  metadata: { invoice: 'in_globex' },
})

const browser = await launchBrowser(t)
const findings: AxeFinding[] = []
const overflow: Record<string, string[]> = {}
const watches: ReturnType<typeof watchPage>[] = []
async function screen(page: Page, name: string, dir?: string) {
  findings.push(...(await axeFindings(page, name)))
  const shot = await screenshots(page, name, dir)
  if (shot.overflowAt390 > 0) overflow[name] = shot.widest
}
async function newPage(): Promise<Page> {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
  page.setDefaultTimeout(15_000)
  watches.push(watchPage(page, gateway.url))
  return page
}
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  if ((await eventually(10_000, check, 100)) === null) throw new Error(`never: ${what}`)
}
interface Point {
  kind: string
  change: number
  units_left: number
}
const chartPoints = async (page: Page): Promise<Point[]> =>
  JSON.parse((await page.getByTestId('credit-chart tokens').getAttribute('data-series')) ?? '[]')
/** The coloured pixels of the chart's canvas: a drawn line has some. */
const inked = (page: Page) =>
  page.getByTestId('credit-chart tokens').evaluate((figure) => {
    const canvas = figure.querySelector('canvas')
    const context = canvas?.getContext('2d')
    if (canvas == null || context == null || canvas.width === 0) return 0
    const { data } = context.getImageData(0, 0, canvas.width, canvas.height)
    let count = 0
    for (let i = 3; i < data.length; i += 4) if (data[i]! > 0) count++
    return count
  })

t.test("the console: a sub-account's balance, burn-down, grants, a grant and a void", async (t) => {
  const page = await newPage()
  await page.goto(`${gateway.url}/console`)
  await page.getByLabel('Parent API key').fill(parent.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  await page.goto(`${gateway.url}/console#/sub-accounts/${acme}`)
  await page.getByRole('heading', { name: 'Acme' }).waitFor()
  await page.getByRole('link', { name: 'Credits of Acme' }).click()
  await page.getByRole('heading', { name: 'Credits of Acme' }).waitFor()
  t.equal(new URL(page.url()).hash, `#/sub-accounts/${acme}/credits`, 'a route of its own')

  await page.getByTestId('balance tokens').waitFor()
  t.equal(await page.getByTestId('balance tokens').innerText(), '1200 tokens left', '1000 + 500 + 40 − 300 − 40')
  t.match(await page.getByTestId('credit-balances').innerText(), /Required: refused at zero \(402\); low below 10%/)

  // The chart: the API's points, drawn.
  const points = await chartPoints(page)
  t.same(
    points.map((p) => `${p.kind} ${p.change} ${p.units_left}`),
    [
      'start 0 0',
      'granted 1000 1000',
      'granted 500 1500',
      'granted 40 1540',
      'voided -40 1500',
      'burned -300 1200',
      'end 0 1200',
    ],
  )
  // The console asks for the last 30 days; the same call here (the points of `now` aside).
  const to = new Date().toISOString().slice(0, 10)
  const from = new Date(Date.now() - 29 * 86_400_000).toISOString().slice(0, 10)
  t.match(await page.getByTestId('credit-chart tokens').locator('figcaption').innerText(), `${from} to ${to}`)
  const history = await manage('GET', `/${acme}/credits/history?from=${from}&to=${to}`)
  const dated = (all: (Point & { at: string })[]) =>
    all.map((p) => (p.kind === 'burned' || p.kind === 'end' ? { ...p, at: 'now' } : p))
  t.same(
    dated(points as (Point & { at: string })[]),
    dated(history.meters[0].points),
    "the figure holds the API's points",
  )
  t.ok((await inked(page)) > 100, 'the line is drawn on the canvas')
  t.match(
    await page.getByTestId('credit-chart tokens').getByRole('img').getAttribute('aria-label'),
    /from 0 to 1200 tokens left/,
  )

  // The grants, as use burns them: the top-up (priority 50) first, then the first; the voided last.
  const rows = page.getByTestId('credit-grants').locator('tbody tr')
  t.same(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-state'))), ['live', 'live', 'voided'])
  t.match(await rows.nth(0).innerText(), /tokens\s+500\s+500\s+50/)
  t.match(await rows.nth(1).innerText(), /tokens\s+1000\s+700\s+100[\s\S]*invoice: in_acme_1/)
  t.match(await rows.nth(2).innerText(), /tokens\s+40\s+0[\s\S]*Voided/)
  await screen(page, 'credits')

  // A grant in the past is refused beside its field.
  const form = page.getByRole('form', { name: 'Grant credits' })
  await form.getByLabel('Units').fill('250')
  await form.getByLabel(/^Expires at/).fill('2020-01-01T00:00')
  await form.getByRole('button', { name: 'Grant credits' }).click()
  await page.getByTestId('grant-expires-error').waitFor()
  t.match(await page.getByTestId('grant-expires-error').innerText(), /must be in the future/)
  t.equal(await form.getByLabel(/^Expires at/).getAttribute('aria-invalid'), 'true')
  t.equal((await manage('GET', `/${acme}/credits`)).grants.length, 3, 'nothing granted')

  // A top-up made on the screen: the balance, the grants and the chart follow.
  await form.getByLabel(/^Expires at/).fill('')
  await form.getByLabel('Units').fill('250')
  await form.getByRole('button', { name: 'Grant credits' }).click()
  await page.getByTestId('grant-saved').waitFor()
  t.match(await page.getByTestId('grant-saved').innerText(), /250 tokens granted at/)
  await until(
    async () => (await page.getByTestId('balance tokens').innerText()) === '1450 tokens left',
    'the new balance',
  )
  t.same((await manage('GET', `/${acme}/credits`)).balances, [{ meter: 'tokens', units_left: 1450 }], 'the API agrees')
  // The open period's burns are placed now, after it: the grant is the step before them.
  const charted = await chartPoints(page)
  t.match(charted.at(-3), { kind: 'granted', change: 250 }, 'charted')
  t.match(charted.at(-1), { kind: 'end', units_left: 1450 })

  // A void, asked first: refused, then accepted.
  const voidTopUp = page.getByRole('button', { name: `Void the grant of 500 tokens (${topUp.id.slice(0, 8)}…)` })
  page.once('dialog', (dialog) => void dialog.dismiss())
  await voidTopUp.click()
  t.equal((await manage('GET', `/${acme}/credits`)).balances[0].units_left, 1450, 'declined: nothing voided')
  page.once('dialog', (dialog) => {
    t.match(dialog.message(), /500 tokens left are gone at once/)
    void dialog.accept()
  })
  await voidTopUp.click()
  await until(async () => (await page.getByTestId('balance tokens').innerText()) === '950 tokens left', 'voided')
  t.match((await chartPoints(page)).at(-3), { kind: 'voided', change: -500 }, 'charted')
  t.equal(await page.getByTestId('credit-grants').getByText(String(theirs.units)).count(), 0, "not Globex's grant")

  await page.goto(`${gateway.url}/console#/sub-accounts/..%2F/credits`)
  await page.getByRole('alert').waitFor()
  t.match(await page.getByRole('alert').innerText(), /not_found/, 'an odd address: no call')
})

const portalLink = async (sub: string, permissions: string[]) => {
  const made = await manage('POST', `/${sub}/portal-sessions`, { permissions })
  const url = new URL(made.url as string)
  return `${gateway.url}${url.pathname}${url.search}${url.hash}`
}

t.test("the portal: the customer's balance and grants, never another's", async (t) => {
  const page = await newPage()
  await page.goto(await portalLink(acme, ['usage:read']))
  await page.getByTestId('portal-account').waitFor()
  await page.getByRole('link', { name: 'Credits' }).click()
  await page.getByRole('heading', { name: 'Credits' }).waitFor()
  await page.getByTestId('balance tokens').waitFor()
  const { balances, grants } = await manage('GET', `/${acme}/credits`)
  t.equal(await page.getByTestId('balance tokens').innerText(), `${balances[0].units_left} tokens left`)
  const rows = page.getByTestId('credit-grants').locator('tbody tr')
  t.equal(await rows.count(), grants.length, 'every grant of its own')
  t.equal(await page.getByRole('button', { name: /Void/ }).count(), 0, 'read-only')
  const text = await page.locator('main').innerText()
  t.notMatch(text, /9000/, "Globex's grant is not there")
  t.notMatch(text, /in_acme_1|invoice/, "the parent's metadata is not shown")

  // What the page's own session reaches: its sub-account's credits, and nothing named by the request.
  const reach = await page.evaluate(async (other) => {
    const get = async (path: string) => {
      const res = await fetch(`/portal/api${path}`, { credentials: 'same-origin' })
      return { status: res.status, body: await res.text() }
    }
    return { own: await get('/credits'), other: await get(`/credits?sub_account_id=${other}`) }
  }, globex)
  t.equal(reach.own.status, 200)
  t.notMatch(reach.own.body, theirs.id, "never Globex's grant")
  t.notMatch(reach.own.body, /in_acme_1/)
  t.equal(reach.other.status, 400, 'another sub-account cannot be asked for')
  await screen(page, 'portal-credits', PORTAL_ARTIFACTS)

  // Globex's own session sees its own grant only.
  const other = await newPage()
  await other.goto(await portalLink(globex, ['usage:read']))
  await other.getByTestId('portal-account').waitFor()
  await other.getByRole('link', { name: 'Credits' }).click()
  await other.getByTestId('balance tokens').waitFor()
  t.equal(await other.getByTestId('balance tokens').innerText(), '9000 tokens left')
  t.equal(await other.getByTestId('credit-grants').locator('tbody tr').count(), 1)
  t.notMatch(await other.locator('main').innerText(), /1000|500/, "none of Acme's grants")
})

t.test('the portal without usage:read: no Credits screen, and the API refuses', async (t) => {
  const page = await newPage()
  await page.goto(await portalLink(acme, ['keys:read', 'requests:read']))
  await page.getByTestId('portal-account').waitFor()
  t.equal(await page.getByRole('link', { name: 'Credits' }).count(), 0, 'not offered')
  const status = await page.evaluate(async () => (await fetch('/portal/api/credits')).status)
  t.equal(status, 403, 'insufficient_scope')
})

t.test('nothing from another host, no policy violation, no serious axe finding, no sideways scroll', async (t) => {
  t.same(
    watches.flatMap((w) => w.foreign),
    [],
    'every request went to the gateway',
  )
  t.same(
    watches.flatMap((w) => w.violations),
    [],
    'no Content-Security-Policy violation, no page error',
  )
  t.same(
    findings.filter((f) => f.impact === 'serious' || f.impact === 'critical'),
    [],
    'axe: no serious or critical violation',
  )
  t.same(overflow, {}, 'no screen scrolls sideways at 390 px')
})

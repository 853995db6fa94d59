// The console's plans (docs/console.md, docs/api.md#plans) in a real browser, against a gateway
// with the real Postgres and Redis: a plan created on the Plans screen and listed with its limits,
// made the default, picked on a sub-account's page (its limits in force shown, the API agreeing),
// and a delete refused while it is in use, with what to do. CSP, axe-core and the 390 px width, as
// test/console/console-account.test.ts checks them.
import t from 'tap'
import type { Page } from 'playwright-core'
import { type AxeFinding, axeFindings, launchBrowser, screenshots, watchPage } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'

const gateway = await startGateway(t)
const parent = await gateway.createParent({ name: 'Plans parent' })
const browser = await launchBrowser(t)
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
const page: Page = await context.newPage()
page.setDefaultTimeout(10_000)
const { foreign, violations } = watchPage(page, gateway.url)

const findings: AxeFinding[] = []
const overflow: Record<string, string[]> = {}
async function screen(name: string) {
  findings.push(...(await axeFindings(page, name)))
  const shot = await screenshots(page, name)
  if (shot.overflowAt390 > 0) overflow[name] = shot.widest
}
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  if ((await eventually(10_000, check, 100)) === null) throw new Error(`never: ${what}`)
}
const manage = async (method: string, url: string, body?: unknown) =>
  (
    await gateway.call(parent.apiKey, { method: method as 'GET', url: `/v1/sub-accounts${url}`, acting: 'self', body })
  ).json()

const sub = await manage('POST', '', { name: 'Customer', limits: { monthly_quota: { requests: 500 } } })

t.test('a plan made on the Plans screen, the default, and picked for a sub-account', async (t) => {
  await page.goto(`${gateway.url}/console`)
  await page.getByLabel('Parent API key').fill(parent.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  await page.getByRole('link', { name: 'Plans' }).click()
  await page.getByRole('heading', { name: 'Plans', exact: true }).waitFor()
  await page.getByText('No plan yet.').waitFor()

  const form = page.getByRole('form', { name: 'New plan' })
  await form.getByLabel('Name').fill('Pro')
  await form.getByLabel('Rate: requests').fill('100')
  await form.getByLabel('Rate: per seconds').fill('60')
  await form.getByRole('button', { name: 'Create plan' }).click()
  await page.getByTestId('plans').waitFor()
  t.match(await page.getByTestId('plans').innerText(), /Pro[\s\S]*100/, 'listed with its limits')
  const [plan] = (await manage('GET', '/plans')).data
  t.match(plan, { name: 'Pro', limits: { rate: { requests: 100, per_seconds: 60 }, monthly_quota: null } })

  // A new sub-account's form offers the plans.
  await page.getByRole('link', { name: 'Sub-accounts' }).click()
  await page.getByRole('button', { name: 'New sub-account' }).click()
  const create = page.getByRole('form', { name: 'New sub-account' })
  await create.getByLabel('Name').fill('Born on Pro')
  await create.getByLabel('Plan', { exact: true }).selectOption(plan.id)
  await create.getByRole('button', { name: 'Create' }).click()
  await until(
    async () => (await manage('GET', '?q=born')).data.some((s: { plan_id: string }) => s.plan_id === plan.id),
    'made on the plan',
  )
  await page.getByRole('link', { name: 'Plans' }).click()
  await page.getByTestId('plans').waitFor()
  await page.getByLabel('Default plan of sub-accounts without one').selectOption(plan.id)
  await until(async () => (await manage('GET', '/settings')).default_plan_id === plan.id, 'the default saved')
  await screen('plans')

  await page.goto(`${gateway.url}/console#/sub-accounts/${sub.id}`)
  await page.getByRole('heading', { name: 'Customer' }).waitFor()
  const picker = page.getByRole('form', { name: 'Plan' })
  await picker.getByTestId('effective-limits').waitFor()
  t.match(await picker.getByTestId('effective-limits').innerText(), /100[\s\S]*500 a month/, 'the default fills in')
  await picker.getByLabel('Plan', { exact: true }).selectOption(plan.id)
  await picker.getByRole('button', { name: 'Save plan' }).click()
  await until(async () => (await manage('GET', `/${sub.id}`)).plan_id === plan.id, 'the plan saved')
  t.same((await manage('GET', `/${sub.id}`)).effective_limits, {
    rate: { requests: 100, per_seconds: 60 },
    monthly_quota: { requests: 500 },
  })
  await screen('sub-account-plan')

  await page.getByRole('link', { name: 'Plans' }).click()
  await page.getByTestId('plans').waitFor()
  page.once('dialog', (dialog) => void dialog.accept())
  await page.getByRole('button', { name: 'Delete the plan Pro' }).click()
  const alert = page.getByRole('alert')
  await alert.waitFor()
  t.match(await alert.innerText(), /plan_in_use[\s\S]*another plan \(or none\) first/, 'refused, with what to do')
  t.equal((await manage('GET', '/plans')).data.length, 1, 'still there')
})

t.test('nothing from another host, no policy violation, no serious axe finding, no sideways scroll', async (t) => {
  t.same(foreign, [], 'every request went to the gateway')
  t.same(violations, [], 'no Content-Security-Policy violation, no page error')
  t.same(
    findings.filter((f) => f.impact === 'serious' || f.impact === 'critical'),
    [],
    'axe: no serious or critical violation',
  )
  t.same(overflow, {}, 'no screen scrolls sideways at 390 px')
})

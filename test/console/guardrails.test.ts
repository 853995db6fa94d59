// The console's guardrails (docs/api.md#key-policies-and-ip-allow-lists, docs/console.md) in a real
// browser, against a gateway with the real Postgres and Redis: a sub-account's key policy set,
// shown and removed through its page; the mint form's hints from it; mints outside it refused with
// the error beside the field; a key minted within it with an IP allow-list, listed with it. CSP,
// axe-core and the 390 px width on every screen, as test/console/console-account.test.ts checks them.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import type { Page } from 'playwright-core'
import { type AxeFinding, axeFindings, launchBrowser, screenshots, watchPage } from '../helpers/browser.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'

const gateway = await startGateway(t)
const parent = await gateway.createParent({ name: 'Guardrails parent' })
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

const policyForm = () => page.getByRole('form', { name: 'Key policy' })
const mintForm = () => page.getByRole('form', { name: 'Mint a key' })
const shownPolicy = () => page.getByTestId('key-policy').innerText()

/** The sub-account as the API shows it now. */
async function subAccount(id: string) {
  const got = await gateway.call(parent.apiKey, { method: 'GET', url: `/v1/sub-accounts/${id}`, acting: 'self' })
  return got.json() as { key_policy: Record<string, unknown> }
}

/**
 * A setup call's made id, the call sent again after a 503 store_unavailable as the answer says to
 * (three browsers starting at once on a slow machine can hold the store past the 1.5 s deadline),
 * under one Idempotency-Key: a first try still running is waited for (409 in flight); one that
 * committed after its 503 is never made twice, and its 409 idempotency_answer_lost names what it
 * made (`(sub_account <id>)`, `(api_key <id>)`).
 */
async function setUp(url: string, body: unknown): Promise<string> {
  const headers = { 'idempotency-key': randomUUID() }
  const giveUpAt = Date.now() + 60_000
  for (;;) {
    const res = await gateway.call(parent.apiKey, { method: 'POST', url, acting: 'self', body, headers })
    const answer = res.json() as { id?: string; code?: string; detail?: string }
    if (res.statusCode === 201) return answer.id!
    if (answer.code === 'idempotency_answer_lost') return /\(\w+ ([0-9a-f-]{36})\)/.exec(answer.detail!)![1]!
    if (answer.code !== 'store_unavailable' && answer.code !== 'idempotency_key_in_flight')
      throw new Error(`POST ${url} answered ${res.statusCode}: ${res.body}`)
    if (Date.now() > giveUpAt) throw new Error(`POST ${url}: still ${res.statusCode} after 60 s: ${res.body}`)
    await new Promise((resolve) => setTimeout(resolve, 500))
  }
}

// A sub-account with a key from before any policy: it has no allow-list of its own.
const subId = await setUp('/v1/sub-accounts', { name: 'Guarded' })
await setUp(`/v1/sub-accounts/${subId}/api-keys`, { name: 'before', scopes: ['orders:read'] })

t.test('the key policy: none shown, a bad entry refused beside its field, then saved', async (t) => {
  await page.goto(`${gateway.url}/console`)
  await page.getByLabel('Parent API key').fill(parent.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
  await page.goto(`${gateway.url}/console#/sub-accounts/${subId}`)
  await page.getByRole('heading', { name: 'Guarded' }).waitFor()

  t.match(await shownPolicy(), /any \(within the account's scope ceiling\)[\s\S]*no limit[\s\S]*any address/)
  t.ok(await policyForm().getByRole('button', { name: 'Remove the policy' }).isDisabled(), 'nothing to remove')
  t.match(
    await policyForm().innerText(),
    /keep their scopes and their expiry[\s\S]*allow-list holds for every key[\s\S]*at once/,
    'what a change does to the keys already minted',
  )

  await policyForm().getByLabel('Allowed scopes or patterns').fill('tracking:*')
  await policyForm().getByLabel('Longest key life', { exact: true }).fill('1')
  await policyForm().getByLabel('Unit').selectOption('days')
  await policyForm().getByLabel('IP allow-list of every key').fill('203.0.113.0/24\n300.1.2.3')
  await policyForm().getByRole('button', { name: 'Save key policy' }).click()
  const ipsError = page.getByTestId('policy-ips-error')
  await ipsError.waitFor()
  t.match(
    await ipsError.innerText(),
    /^300\.1\.2\.3 is not an IPv4 or IPv6 address or CIDR/,
    'the entry, beside its field',
  )
  t.equal(
    await policyForm().getByLabel('IP allow-list of every key').getAttribute('aria-invalid'),
    'true',
    'the field is marked invalid',
  )
  t.match(
    await policyForm().getByRole('alert').innerText(),
    /validation_failed[\s\S]*\/body\/key_policy\/ip_allowlist\/1/,
    'and the alert names it',
  )
  t.equal(
    await policyForm().getByLabel('IP allow-list of every key').inputValue(),
    '203.0.113.0/24\n300.1.2.3',
    'what was typed is kept',
  )
  t.same((await subAccount(subId)).key_policy, { allowed_scopes: null, max_ttl_seconds: null, ip_allowlist: null })

  // A life shorter than the API allows: the unit's seconds are what it judges.
  await policyForm().getByLabel('Longest key life', { exact: true }).fill('0.5')
  await policyForm().getByLabel('Unit').selectOption('minutes')
  await policyForm().getByLabel('IP allow-list of every key').fill('203.0.113.0/24, 2001:db8::/48')
  await policyForm().getByRole('button', { name: 'Save key policy' }).click()
  await page.getByTestId('policy-ttl-error').waitFor()
  t.match(await page.getByTestId('policy-ttl-error').innerText(), /in seconds, must be >= 60/)
  t.equal(await page.getByTestId('policy-ips-error').count(), 0, 'the corrected field has no error')
  await screen('policy-refused')

  await policyForm().getByLabel('Longest key life', { exact: true }).fill('1')
  await policyForm().getByLabel('Unit').selectOption('days')
  await policyForm().getByRole('button', { name: 'Save key policy' }).click()
  await until(async () => (await shownPolicy()).includes('1 day'), 'the policy shown')
  t.match(await shownPolicy(), /tracking:\*[\s\S]*1 day[\s\S]*203\.0\.113\.0\/24 2001:db8::\/48/, 'shown as saved')
  t.match(
    await page.getByTestId('policy-saved').innerText(),
    /^✓ Key policy saved at \d\d:\d\d:\d\d UTC$/,
    'a visible confirmation under the form',
  )
  t.same((await subAccount(subId)).key_policy, {
    allowed_scopes: ['tracking:*'],
    max_ttl_seconds: 86_400,
    ip_allowlist: ['203.0.113.0/24', '2001:db8::/48'],
  })
  t.equal(await policyForm().getByLabel('Unit').inputValue(), 'days', 'the form shows it in days')
})

t.test('the mint form: the policy as hints, refusals beside their fields, a key with an allow-list', async (t) => {
  t.match(await page.getByTestId('mint-scopes-help').innerText(), /allows only tracking:\*/, 'the allowed scopes')
  const expires = mintForm().getByLabel(/^Expires at \(required/)
  t.ok((await expires.getAttribute('required')) !== null, 'an expiry is required')
  t.match(await page.getByTestId('mint-expires-help').innerText(), /at most 1 day/, 'the longest life')
  const offered = await expires.inputValue()
  const offeredMs = await page.evaluate((value) => new Date(`${value}Z`).getTime(), offered)
  t.ok(
    offeredMs <= Date.now() + 86_400_000 && offeredMs > Date.now() + 86_400_000 - 120_000,
    `a default at the longest life, within it: ${offered}`,
  )
  t.match(await mintForm().innerText(), /allows only 203\.0\.113\.0\/24 2001:db8::\/48/, "the policy's allow-list")

  // A scope outside the policy.
  await mintForm().getByLabel('Name', { exact: true }).fill('outside')
  await mintForm()
    .getByLabel(/^Scopes/)
    .fill('tracking:read orders:read')
  await mintForm().getByRole('button', { name: 'Mint key' }).click()
  await page.getByTestId('mint-scopes-error').waitFor()
  t.match(
    await page.getByTestId('mint-scopes-error').innerText(),
    /^orders:read is outside the sub-account's key_policy\.allowed_scopes \(tracking:\*\)/,
    'the scope refused, beside the field',
  )
  t.match(await mintForm().getByRole('alert').innerText(), /\/body\/scopes\/1/)

  // An expiry beyond the longest life.
  await mintForm()
    .getByLabel(/^Scopes/)
    .fill('tracking:read')
  await expires.fill('2035-01-01T12:00')
  await mintForm().getByRole('button', { name: 'Mint key' }).click()
  await page.getByTestId('mint-expires-error').waitFor()
  t.match(
    await page.getByTestId('mint-expires-error').innerText(),
    /^Expires at is more than key_policy\.max_ttl_seconds/,
  )
  t.equal(await page.getByTestId('mint-scopes-error').count(), 0, 'the scopes are no longer refused')

  // An allow-list entry that is no address.
  await expires.fill(offered)
  await mintForm().getByLabel('IP allow-list').fill('203.0.113.7, 2001:db8::/64, nowhere')
  await mintForm().getByRole('button', { name: 'Mint key' }).click()
  await page.getByTestId('mint-ips-error').waitFor()
  t.match(await page.getByTestId('mint-ips-error').innerText(), /^nowhere is not an IPv4 or IPv6 address/)
  await screen('mint-refused')

  // Within the policy, with an allow-list of its own.
  await mintForm().getByLabel('Name', { exact: true }).fill('within')
  await mintForm().getByLabel('IP allow-list').fill('203.0.113.7\n2001:db8::/64')
  await mintForm().getByRole('button', { name: 'Mint key' }).click()
  const dialog = page.getByTestId('dialog')
  await dialog.waitFor()
  t.match(await dialog.innerText(), /usable from 203\.0\.113\.7 2001:db8::\/64/, 'the dialog says where from')
  await page.keyboard.press('Escape')
  await dialog.waitFor({ state: 'detached' })
  await until(async () => (await page.getByTestId('keys').locator('tbody tr').count()) === 2, 'two keys listed')
  const rows = await page.getByTestId('keys').locator('tbody tr').allInnerTexts()
  t.match(
    rows.find((r) => r.startsWith('within')),
    /203\.0\.113\.7 2001:db8::\/64/,
    'its allow-list listed',
  )
  t.match(
    rows.find((r) => r.startsWith('before')),
    /any address/,
    'a key without one: any address',
  )
  t.equal(await mintForm().getByLabel('IP allow-list').inputValue(), '', 'the form emptied')
  t.not(await expires.inputValue(), '', 'the default offered again')

  const keys = await gateway.call(parent.apiKey, {
    method: 'GET',
    url: `/v1/sub-accounts/${subId}/api-keys`,
    acting: 'self',
  })
  const within = (keys.json() as { data: { name: string; ip_allowlist: string[]; scopes: string[] }[] }).data.find(
    (k) => k.name === 'within',
  )
  t.same(within?.ip_allowlist, ['203.0.113.7', '2001:db8::/64'], 'sent as ip_allowlist')
  t.same(within?.scopes, ['tracking:read'])
  await screen('policy-set')
})

t.test('the policy removed: shown as none, the expiry optional again', async (t) => {
  await policyForm().getByRole('button', { name: 'Remove the policy' }).click()
  await until(async () => (await shownPolicy()).includes('no limit'), 'no policy shown')
  t.match(await shownPolicy(), /any \(within the account's scope ceiling\)[\s\S]*no limit[\s\S]*any address/)
  t.same((await subAccount(subId)).key_policy, { allowed_scopes: null, max_ttl_seconds: null, ip_allowlist: null })
  t.equal(await policyForm().getByLabel('Allowed scopes or patterns').inputValue(), '', 'the form emptied')
  t.match(await page.getByTestId('policy-saved').innerText(), /Key policy removed at/, 'said visibly')
  const expires = mintForm().getByLabel(/^Expires at \(optional/)
  t.equal(await expires.getAttribute('required'), null, 'no expiry required')
  t.equal(await expires.inputValue(), '', 'none offered')
  t.equal(await page.getByTestId('mint-scopes-help').count(), 0, 'no scope hint')
})

t.test("the scope picker: within the operator's ceiling and the key policy; typing still works", async (t) => {
  await gateway.sql`update tenants set allowed_scopes = array['orders:read', 'tracking:*', 'billing:read']
                    where id = ${parent.id}`
  t.teardown(() => gateway.sql`update tenants set allowed_scopes = null where id = ${parent.id}`)
  const patched = await gateway.call(parent.apiKey, {
    method: 'PATCH',
    url: `/v1/sub-accounts/${subId}`,
    acting: 'self',
    body: { key_policy: { allowed_scopes: ['tracking:*', 'billing:read', 'billing:write'] } },
  })
  t.equal(patched.statusCode, 200)
  await page.reload()
  await page.getByTestId('keys').waitFor()
  const picker = mintForm().getByTestId('scope-picker')
  await picker.waitFor()
  t.same(
    await picker.getByRole('button').allInnerTexts(),
    ['billing:read', 'tracking:*'],
    'what both lists allow: not orders:read (the policy), nor billing:write (the ceiling)',
  )
  t.match(await picker.innerText(), /within the account's scope ceiling and the key policy/, 'says what bounds it')
  t.match(
    await page.getByTestId('mint-scopes-ceiling').innerText(),
    /ceiling \(set by the gateway's operator\) allows only orders:read tracking:\* billing:read/,
    'the ceiling beside the field',
  )
  const scopes = mintForm().getByLabel(/^Scopes/)
  t.match(await scopes.getAttribute('aria-describedby'), /mint-scopes-ceiling/, 'which describes the field')
  // A scope the picker does not list, typed; one pressed beside it.
  await mintForm().getByLabel('Name', { exact: true }).fill('picked')
  await scopes.fill('tracking:read')
  await picker.getByRole('button', { name: 'billing:read' }).click()
  t.equal(await scopes.inputValue(), 'tracking:read billing:read')
  await mintForm().getByRole('button', { name: 'Mint key' }).click()
  await page.getByTestId('dialog').waitFor()
  await page.keyboard.press('Escape')
  await page.getByTestId('dialog').waitFor({ state: 'detached' })
  const keys = await gateway.call(parent.apiKey, {
    method: 'GET',
    url: `/v1/sub-accounts/${subId}/api-keys`,
    acting: 'self',
  })
  const picked = (keys.json() as { data: { name: string; scopes: string[] }[] }).data.find((k) => k.name === 'picked')
  t.same(picked?.scopes, ['tracking:read', 'billing:read'], 'minted with both')
  await screen('scope-picker')
})

t.test('the longest allow-list fits 390 pixels', async (t) => {
  const many = Array.from({ length: 100 }, (_, i) => `2001:db8:${i.toString(16)}:ffff:ffff:ffff:ffff:0/112`)
  const patched = await gateway.call(parent.apiKey, {
    method: 'PATCH',
    url: `/v1/sub-accounts/${subId}`,
    acting: 'self',
    body: { key_policy: { allowed_scopes: ['tracking:*'], ip_allowlist: many } },
  })
  t.equal(patched.statusCode, 200)
  const minted = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${subId}/api-keys`,
    acting: 'self',
    body: { name: 'wide', scopes: ['tracking:read'], ip_allowlist: many },
  })
  t.equal(minted.statusCode, 201)
  await page.reload()
  await page.getByTestId('keys').waitFor()
  t.match(await shownPolicy(), many[99]!)
  await screen('policy-long')
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

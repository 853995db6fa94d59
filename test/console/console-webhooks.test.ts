// The console in a real browser (docs/console.md), beside one account's story: webhook endpoints
// (the secret once, a real delivery listed, delete), the routes screen, and a key revoked
// mid-session. The bench (gateway, upstream, Chromium, axe): test/helpers/console-session.ts.
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { KEY_COMMANDS } from '../../src/cli/key-commands.js'
import type { Config } from '../../src/config.js'
import { sleep } from '../helpers/poll.js'
import { REDIS_URL } from '../helpers/redis.js'
import { answerOk, startReceiver } from '../helpers/webhook-receiver.js'
import { alert, cardsFit, checkNothingForeign, gateway, keepAxeFindings, live } from '../helpers/console-session.js'
import { page, parent, screen, signIn, until, upstream } from '../helpers/console-session.js'

keepAxeFindings('axe-webhooks.json')

t.test('signed in with the parent key', async (t) => {
  await signIn(parent.apiKey)
  t.pass('the first screen')
})

t.test('webhook endpoints: secret once, a real delivery listed, delete', async (t) => {
  const receiver = await startReceiver(t)
  await page.getByRole('link', { name: 'Webhooks' }).click()
  await page.getByText('No webhook endpoints yet').waitFor()
  await page.getByLabel('URL (https)').fill(receiver.url)
  // The event types are picked from the catalogue: a kind's every event, or single types.
  const offered = await page
    .getByRole('group', { name: 'Event types' })
    .getByRole('checkbox')
    .evaluateAll((boxes) => boxes.map((b) => (b as HTMLInputElement).value))
  for (const type of ['sub_account.*', 'sub_account.created', 'api_key.*', 'api_key.rolled', 'webhook_endpoint.test'])
    t.ok(offered.includes(type), `${type} offered`)
  await page.getByLabel('Every sub_account event (sub_account.*)').check()
  await page.getByLabel('Every api_key event (api_key.*)').check()
  await page.getByRole('button', { name: 'Create endpoint' }).click()
  await page.getByTestId('dialog').waitFor()
  const secret = await page.getByLabel('Signing secret').inputValue()
  t.match(secret, /^whsec_/, 'the secret, once')
  receiver.secret(secret)
  await page.getByRole('button', { name: 'Close' }).click()
  await page.getByTestId('dialog').waitFor({ state: 'detached' })
  t.equal(await page.locator('[data-secret]').count(), 0, 'gone when the dialog closes')
  await page.getByTestId('endpoints').waitFor()

  // No change since it was made: the empty state.
  await page.getByRole('button', { name: /^Deliveries/ }).click()
  const deliveries = page.getByTestId('deliveries')
  await deliveries.getByText('No delivery yet').waitFor()
  t.pass('no delivery yet')

  // A change the endpoint subscribes to: the worker delivers it to the receiver, signed.
  const made = await gateway.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'Delivered' },
  })
  t.equal(made.statusCode, 201)
  await until(async () => receiver.deliveries.length === 1, 'the receiver got the event')
  const [got] = receiver.deliveries
  t.ok(got?.verified, 'signed with the secret the dialog showed')

  // The deliveries screen lists that very attempt, as the route answers it.
  await until(async () => {
    await page.getByRole('link', { name: 'Audit log' }).click()
    await page.getByTestId('events').waitFor()
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByRole('button', { name: /^Deliveries/ }).click()
    await deliveries.locator('table, .empty').first().waitFor()
    return (await deliveries.locator('tbody tr').count()) === 1
  }, 'the attempt listed')
  t.match(await page.getByTestId('endpoints').innerText(), 'sub_account.* api_key.*', 'the types picked')
  const cells = await deliveries.locator('tbody tr td').allInnerTexts()
  t.equal(cells[0], got!.id, 'its event id, the webhook-id the receiver got')
  t.equal(cells[1], 'sub_account.created', 'its type')
  t.equal(cells[2], '1', 'the first attempt')
  t.equal(cells[3], '200', "the receiver's status")
  t.equal(cells[4], '—', 'no error')
  t.match(cells[5], /^\d+ ms$/, 'its duration')
  t.equal(cells[7], '—', 'no next attempt')
  t.match(await live().innerText(), /1 delivery shown/, 'announced')
  await screen('webhooks')

  // A receiver that fails: the attempt with its status, the error and when the next one is due.
  receiver.answer((_delivery, response) => response.writeHead(503).end())
  const failing = await gateway.call(parent.apiKey, {
    method: 'PATCH',
    url: `/v1/sub-accounts/${made.json().id}`,
    acting: 'self',
    body: { name: 'Delivered again' },
  })
  t.equal(failing.statusCode, 200)
  await until(async () => receiver.deliveries.length === 2, 'the receiver got the second event')
  await until(async () => {
    await page.getByRole('link', { name: 'Audit log' }).click()
    await page.getByTestId('events').waitFor()
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByRole('button', { name: /^Deliveries/ }).click()
    await deliveries.locator('table').waitFor()
    return (await deliveries.locator('tbody tr').count()) === 2
  }, 'the failed attempt listed')
  const failed = await deliveries.locator('tbody tr').first().locator('td').allInnerTexts()
  t.equal(failed[0], receiver.deliveries[1]!.id, 'newest first: the second event')
  t.equal(failed[1], 'sub_account.updated', 'its type')
  t.equal(failed[3], '503', "the receiver's status")
  t.match(failed[4], /503/, 'the error')
  t.match(failed[7], /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/, 'when the next attempt is due')

  // The receiver mended: the failed event sent again at once, from its row.
  receiver.answer(answerOk)
  const failedId = receiver.deliveries[1]!.id
  const buttons = await deliveries.getByRole('button').allInnerTexts()
  t.same([...new Set(buttons)], buttons, `one Send again an event, each named by it: ${buttons.join('; ')}`)
  await deliveries.getByRole('button', { name: `Send again ${failedId}`, exact: true }).click()
  await page.getByTestId('resent').waitFor()
  t.match(
    await page.getByTestId('resent').innerText(),
    new RegExp(`^✓ sub_account.updated ${failedId} queued again \\(attempt 2\\) at \\d\\d:\\d\\d:\\d\\d UTC$`),
    'a visible confirmation',
  )
  await until(async () => receiver.deliveries.filter((d) => d.id === failedId && d.verified).length >= 2, 'sent again')
  const firstRow = () => deliveries.locator('tbody tr').first().locator('td').allInnerTexts()
  const refreshDeliveries = async () => {
    await page.getByRole('link', { name: 'Audit log' }).click()
    await page.getByTestId('events').waitFor()
    await page.getByRole('link', { name: 'Webhooks' }).click()
    await page.getByRole('button', { name: /^Deliveries/ }).click()
    await deliveries.locator('table').waitFor()
  }
  await until(async () => {
    await refreshDeliveries()
    const row = await firstRow()
    return row[0] === failedId && row[3] === '200'
  }, 'the resend listed, delivered')
  t.equal((await firstRow())[2], '2', 'as its second attempt')

  // A test send: a webhook_endpoint.test event to this endpoint, signed, listed with its type.
  await page.getByRole('button', { name: `Send test event to ${receiver.url}`, exact: true }).click()
  await page.getByTestId('test-sent').waitFor()
  t.match(await page.getByTestId('test-sent').innerText(), /^✓ Test event evt_\w+ queued for http/, 'confirmed')
  const testType = (d: { verified: unknown }) => (d.verified as { type?: string } | null)?.type
  await until(async () => receiver.deliveries.some((d) => testType(d) === 'webhook_endpoint.test'), 'the test sent')
  const testId = receiver.deliveries.find((d) => testType(d) === 'webhook_endpoint.test')!.id
  t.match(await page.getByTestId('test-sent').innerText(), testId, 'the confirmation names the event delivered')
  await until(async () => {
    await refreshDeliveries()
    const row = await firstRow()
    return row[0] === testId && row[1] === 'webhook_endpoint.test' && row[3] === '200'
  }, 'the test listed')
  t.pass('the test event listed with its type')

  await cardsFit(t, 'endpoints')
  await cardsFit(t, 'deliveries-table')
  await page.getByRole('button', { name: /^Delete/ }).click()
  await page.getByText('No webhook endpoints yet').waitFor()
  t.pass('deleted')
})

t.test('routes: which carry WebSockets, with their bounds, and no upstream address', async (t) => {
  t.notOk((await page.content()).includes(upstream.url.replace(/^http:\/\//, '')), 'no upstream address in the page')
  await page.getByRole('link', { name: 'Routes' }).click()
  await page.getByRole('heading', { name: 'Routes' }).waitFor()
  const rows = await page.getByTestId('routes').locator('tbody tr').allInnerTexts()
  const rowOf = (prefix: string) => rows.find((row) => row.startsWith(prefix)) ?? ''
  t.match(rowOf('/live'), /live:read[\s\S]*live:write/, 'its read and write scopes')
  t.match(
    rowOf('/live'),
    /Yes: up to 7 per tenant and \d+ per parent account, closed after 2 min idle, messages up to 64 KiB/,
    'a WebSocket route, with its bounds',
  )
  t.match(
    rowOf('/status'),
    /none \(public\)[\s\S]*No\s+Same origin only\s/,
    'a public route, without WebSockets or CORS',
  )
  t.match(rowOf('/\t'), /any key[\s\S]*No\s+Same origin only\s/, 'the catch-all: any key, no WebSockets')
  await screen('routes')
})

t.test('a key revoked mid-session: signed out, told why', async (t) => {
  const second = await mintKey(gateway.sql, {
    tenantId: parent.id,
    name: 'console',
    scopes: ['sub_accounts:read', 'sub_accounts:write'],
    withClientSecret: false,
  })
  await page.evaluate(() => sessionStorage.clear())
  await page.goto(`${gateway.url}/console#/sub-accounts`)
  await page.getByLabel('Parent API key').fill(second.apiKey)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByTestId('subaccounts').waitFor()
  await KEY_COMMANDS['keys revoke']!(
    gateway.sql,
    { account: parent.id, key: second.row.id },
    { redis: { topology: 'server', url: REDIS_URL }, redisKeyPrefix: gateway.redisKeyPrefix } as Config,
    // A command writes only a warning itself (Redis unreachable): shown, as the CLI shows it.
    { stdout: () => {}, stderr: (text) => process.stderr.write(text) },
  )
  // The next call the page makes is refused: moving between screens makes calls.
  await until(async () => {
    if (await page.getByLabel('Parent API key').isVisible()) return true
    await page.evaluate(() => {
      location.hash = location.hash === '#/events' ? '#/sub-accounts' : '#/events'
    })
    await sleep(300)
    return false
  }, 'signed out')
  const text = await alert().innerText()
  t.match(text, /signed out/i)
  t.match(text, /401/)
  t.match(text, /sign in again/i, 'what to do')
  t.equal(await page.evaluate(() => sessionStorage.length), 0, 'the refused key is forgotten')
})

checkNothingForeign()

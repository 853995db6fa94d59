// The console's test bench (docs/console.md): a gateway on a socket with the real Postgres and
// Redis, an upstream, a parent account, and Chromium on the console, with what every console file
// checks on the way: axe-core and screenshots of each screen, nothing asked of another host, no
// policy violation. Deactivate, roll, revoke and delete ask first: `dialogs.accept` answers.
//
// Importing this module starts it all on the importing file's root test (a tap file is a process
// of its own), so each console file has its own gateway, database, Redis key prefix and browser.
import t from 'tap'
import type { Page } from 'playwright-core'
import { type AxeFinding, axeFindings, launchBrowser, screenshots, watchPage, writeArtifact } from './browser.js'
import { startGateway } from './gateway.js'
import { UNHURRIED_LIMITS } from './limits.js'
import { eventually } from './poll.js'
import { startUpstream } from './upstream.js'

export const upstream = await startUpstream(t, (request, response) => {
  const status = request.url === '/v1/missing' ? 404 : request.url === '/v1/boom' ? 500 : 200
  response.writeHead(status, { 'content-type': 'application/json' })
  response.end('{}')
})
export const gateway = await startGateway(t, {
  upstreamUrl: upstream.url,
  // Beside the catch-all: a WebSocket route and a public one, for the Routes screen.
  gatewayConfig: {
    routes: [
      {
        prefix: '/live',
        upstream: upstream.url,
        scopes: { read: ['live:read'], write: ['live:write'] },
        websocket: true,
        max_websockets_per_tenant: 7,
        websocket_idle_timeout_ms: 120_000,
        websocket_max_message_bytes: 65_536,
      },
      { prefix: '/status', upstream: `${upstream.url}/internal-base`, public: true },
    ],
  },
  usageFlushIntervalMs: 100,
  // The screens count what the limits let through, not how fast Redis answers (the browser and the
  // gateway share a busy machine: one run let 16 pass a limit of 8 while degraded).
  ...UNHURRIED_LIMITS,
  env: { WEBHOOKS_ALLOW_INSECURE: 'true' },
  webhookDelivery: { pollIntervalMs: 50 },
})
export const parent = await gateway.createParent({ name: 'Console parent' })
export const browser = await launchBrowser(t)
export const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: gateway.url })
export const page: Page = await context.newPage()
// A step that cannot happen fails in 10 s, not playwright's 30.
page.setDefaultTimeout(10_000)

// Everything the page asks for must be the gateway's, and the policy must refuse nothing it does.
export const { foreign, violations } = watchPage(page, gateway.url)
// Deactivate, roll, revoke and delete ask first: accepted, unless a test says no (`dialogs.accept`).
export const dialogs = { asked: [] as string[], accept: true }
page.on('dialog', (dialog) => {
  dialogs.asked.push(dialog.message())
  void (dialogs.accept ? dialog.accept() : dialog.dismiss())
})

export const findings: AxeFinding[] = []
export const overflow: Record<string, number> = {}
export const widest: Record<string, string[]> = {}
export async function screen(name: string) {
  findings.push(...(await axeFindings(page, name)))
  const shot = await screenshots(page, name)
  overflow[name] = shot.overflowAt390
  if (shot.overflowAt390 > 0) widest[name] = shot.widest
}

/** Polls `check` for up to 10 s; fails the test with `what` if it never holds. */
export async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  if ((await eventually(10_000, check, 100)) === null) throw new Error(`never: ${what}`)
}

export const alert = () => page.getByRole('alert')
export const live = () => page.getByTestId('live')

/** What cardsFit asks of a subtest. */
export interface Asserts {
  ok(value: unknown, message: string): unknown
  equal(found: unknown, wanted: unknown, message: string): unknown
  same(found: unknown, wanted: unknown, message: string): unknown
}

/**
 * At 390 pixels, a table of cards: every cell of every row within the window (none off the right
 * edge, nor scrolled to), under its column's name. Back at 1280 after.
 */
export async function cardsFit(t: Asserts, testId: string): Promise<void> {
  await page.setViewportSize({ width: 390, height: 844 })
  await page.waitForTimeout(100)
  const cells = await page
    .getByTestId(testId)
    .locator('tbody td')
    .evaluateAll((tds) =>
      tds.map((td) => {
        const r = td.getBoundingClientRect()
        return {
          label: getComputedStyle(td, '::before').content,
          right: r.right,
          left: r.left,
          actions: td.classList.contains('row-actions'),
        }
      }),
    )
  const wrap = await page
    .getByTestId(testId)
    .evaluate((table) => (table.parentElement!.scrollWidth - table.parentElement!.clientWidth) as number)
  await page.setViewportSize({ width: 1280, height: 800 })
  t.ok(cells.length > 0, `${testId}: cells`)
  t.same(
    cells.filter((c) => c.right > 391 || c.left < 0),
    [],
    `${testId}: every cell within the 390 px window`,
  )
  t.equal(wrap <= 0, true, `${testId}: nothing to scroll sideways to`)
  t.same(
    cells.filter((c) => !c.actions && !/^"[A-Z]/.test(c.label)),
    [],
    `${testId}: each cell under its column's name`,
  )
}

/** Signs in on the console with `key`, as a person would, and waits for the first screen. */
export async function signIn(key: string): Promise<void> {
  await page.goto(`${gateway.url}/console`)
  await page.getByLabel('Parent API key').fill(key)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sub-accounts' }).waitFor()
}

/** At teardown, writes the file's axe findings, by impact, to test-artifacts/console/`name`. */
export function keepAxeFindings(name: string): void {
  t.teardown(async () => {
    const counts = { minor: 0, moderate: 0, serious: 0, critical: 0 }
    for (const f of findings) counts[f.impact]++
    await writeArtifact(name, { counts, findings })
  })
}

/** The last test of every console file: what the page did across all of its tests. */
export function checkNothingForeign(): void {
  t.test('nothing from another host, no policy violation, no serious or critical axe finding', async (t) => {
    t.same(foreign, [], 'every request went to the gateway')
    t.same(violations, [], 'no Content-Security-Policy violation, no page error')
    const serious = findings.filter((f) => f.impact === 'serious' || f.impact === 'critical')
    t.same(serious, [], 'axe: no serious or critical violation on any screen')
    t.same(
      Object.entries(overflow).filter(([, px]) => px > 0),
      [],
      `no screen scrolls sideways at 390 px: ${JSON.stringify(widest)}`,
    )
  })
}

// A real browser for the console's tests: Debian's Chromium (never a downloaded build), driven by
// playwright-core, with the flags that keep it off the network; axe-core's check of a screen; and
// screenshots at a desktop and a phone width into test-artifacts/console/ (docs/console.md), or
// the portal's into test-artifacts/portal/ (docs/portal.md).
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { AxeBuilder } from '@axe-core/playwright'
import { type Browser, chromium, type Page } from 'playwright-core'
import type { TestLike } from './test-like.js'

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
export const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'console')
export const PORTAL_ARTIFACTS = join(process.cwd(), 'test-artifacts', 'portal')

/** Without the background-networking flags Chromium keeps calling home on a closed network. */
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]

export async function launchBrowser(t: TestLike): Promise<Browser> {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS })
  t.teardown(() => browser.close())
  await mkdir(ARTIFACTS, { recursive: true })
  await mkdir(PORTAL_ARTIFACTS, { recursive: true })
  return browser
}

/**
 * The elements whose right edge passes the window's, outside any scrolling box (or positioned, which
 * may escape one): what makes the page
 * scroll sideways. A string, so that tsx's helpers (__name) do not end up in the page.
 */
const STICKING_OUT = `(() => {
  const clipped = (el) => {
    for (let e = el.parentElement; e !== null; e = e.parentElement)
      if (getComputedStyle(e).overflowX !== 'visible') return true
    return false
  }
  return [...document.querySelectorAll('body *')]
    .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1 && (!clipped(el) || getComputedStyle(el).position === 'absolute'))
    .slice(0, 8)
    .map((el) => el.tagName.toLowerCase() + '.' + el.className + ' ' + Math.round(el.getBoundingClientRect().right))
})()`

/**
 * What a page does that the console must never: ask for anything but the gateway's own (`foreign`),
 * break its Content-Security-Policy or throw (`violations`). Filled as the page runs.
 */
export function watchPage(page: Page, origin: string): { foreign: string[]; violations: string[] } {
  const foreign: string[] = []
  const violations: string[] = []
  page.on('request', (request) => {
    if (!request.url().startsWith(`${origin}/`) && !request.url().startsWith('data:')) foreign.push(request.url())
  })
  page.on('console', (message) => {
    if (/Content.Security.Policy|Refused to/i.test(message.text())) violations.push(message.text())
  })
  page.on('pageerror', (err) => violations.push(`page error: ${err.message}`))
  return { foreign, violations }
}

export const VIEWPORTS = [
  { name: '1280', width: 1280, height: 800 },
  { name: '390', width: 390, height: 844 },
] as const

/** The screen at both widths (back at 1280 after), and whether the phone width scrolls sideways. */
export async function screenshots(
  page: Page,
  screen: string,
  dir: string = ARTIFACTS,
): Promise<{ overflowAt390: number; widest: string[] }> {
  let overflowAt390 = 0
  let widest: string[] = []

  for (const viewport of [...VIEWPORTS].reverse()) {
    await page.setViewportSize({ width: viewport.width, height: viewport.height })
    await page.waitForTimeout(100)
    if (viewport.name === '390') {
      // A chart follows the width at its ResizeObserver's next frame, which a loaded machine can
      // hold past the 100 ms above: what still sticks out after 3 s does so for good.
      await page
        .waitForFunction(() => document.documentElement.scrollWidth <= window.innerWidth, null, { timeout: 3_000 })
        .catch(() => {})
      overflowAt390 = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
      // What sticks out, when something does: the elements whose right edge passes the window's.
      widest = await page.evaluate(STICKING_OUT)
    }
    // A long page at 390 px is a tall image: a loaded machine can take longer than the page's
    // default timeout for an action to paint it, and the shot only records what a test asserted.
    await page.screenshot({ path: join(dir, `${screen}-${viewport.name}.png`), fullPage: true, timeout: 60_000 })
  }
  return { overflowAt390, widest }
}

export type Impact = 'minor' | 'moderate' | 'serious' | 'critical'

export interface AxeFinding {
  screen: string
  id: string
  impact: Impact
  help: string
  nodes: number
}

/**
 * axe-core's rules (WCAG 2 A and AA, best practices) on the page as it is now, at its width and at
 * a phone's (390 px, where tables turn into cards): every screen passes at both.
 */
export async function axeFindings(page: Page, screen: string): Promise<AxeFinding[]> {
  const findings = await axeNow(page, screen)
  const size = page.viewportSize()
  if (size === null || size.width <= 390) return findings
  await page.setViewportSize({ width: 390, height: 844 })
  try {
    findings.push(...(await axeNow(page, `${screen} at 390 px`)))
  } finally {
    await page.setViewportSize(size)
  }
  return findings
}

async function axeNow(page: Page, screen: string): Promise<AxeFinding[]> {
  // By default AxeBuilder checks each frame apart and joins the results in a blank page it opens
  // for every check: about half of the console tests' Chromium time. A page without frames needs
  // neither (legacy mode runs axe.run in the page); one with frames (the portal embedded) keeps it.
  // Only violations are read: axe then skips gathering the nodes of every rule that passed.
  const result = await new AxeBuilder({ page })
    .setLegacyMode(page.frames().length === 1)
    .options({ resultTypes: ['violations'] })
    .analyze()
  return result.violations.map((v) => ({
    screen,
    id: v.id,
    impact: (v.impact ?? 'minor') as Impact,
    help: v.help,
    nodes: v.nodes.length,
  }))
}

export async function writeArtifact(name: string, value: unknown): Promise<void> {
  await writeFile(join(ARTIFACTS, name), `${JSON.stringify(value, null, 2)}\n`)
}

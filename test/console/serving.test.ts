// How the gateway serves the console (docs/console.md): the page and its two assets, their
// headers (the Content-Security-Policy, caching, gzip), CONSOLE=off, and the console's path kept
// from the proxy. The console in a browser is console.test.ts.
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { gunzipSync } from 'node:zlib'
import t from 'tap'
import {
  bundleConsole,
  type ConsoleAssets,
  consoleAssets,
  keptOnceLoaded,
  loadAssets,
  readPrebuilt,
} from '../../src/console/assets.js'
import { CONSOLE_CSP } from '../../src/console/plugin.js'
import { ConfigError, loadConfig } from '../../src/config.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

const assetNames = (html: string) =>
  [...html.matchAll(/\/console\/assets\/(console\.[\w-]+\.(?:js|css))/g)].map((m) => m[1]!)

t.test('the page links one script and one stylesheet, by hash, under a same-origin policy', async (t) => {
  const gateway = await startGateway(t, { listen: false })
  const page = await gateway.call(null, { method: 'GET', url: '/console' })
  t.equal(page.statusCode, 200)
  t.match(page.headers['content-type'], /^text\/html; charset=utf-8/)
  t.equal(page.headers['content-security-policy'], CONSOLE_CSP)
  t.match(CONSOLE_CSP, /^default-src 'self';/, "default-src 'self', nothing else allowed by default")
  t.notMatch(CONSOLE_CSP, /unsafe/, 'no unsafe-inline, no unsafe-eval')
  t.equal(page.headers['x-content-type-options'], 'nosniff')
  t.equal(page.headers['cache-control'], 'no-cache', 'revalidated: a new gateway links new assets')
  t.notMatch(page.body, /<script>|<style|style=|https?:\/\//, 'nothing inline, nothing from another host')
  const names = assetNames(page.body)
  t.equal(names.length, 2, 'one script and one stylesheet')
  t.match(page.body, /<script type="module" src="\/console\/assets\/console\.[\w-]+\.js"><\/script>/)

  for (const name of names) {
    const plain = await gateway.call(null, { method: 'GET', url: `/console/assets/${name}` })
    t.equal(plain.statusCode, 200, name)
    t.match(plain.headers['content-type'], name.endsWith('.js') ? /^text\/javascript/ : /^text\/css/)
    t.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable')
    t.equal(plain.headers['content-security-policy'], CONSOLE_CSP)
    t.equal(plain.headers['content-encoding'], undefined, 'not compressed unless asked')
    const etag = String(plain.headers.etag)
    const zipped = await gateway.call(null, {
      method: 'GET',
      url: `/console/assets/${name}`,
      headers: { 'accept-encoding': 'gzip, br' },
    })
    t.equal(zipped.headers['content-encoding'], 'gzip')
    t.equal(zipped.headers.vary, 'accept-encoding')
    t.ok(zipped.rawPayload.length < plain.rawPayload.length, 'smaller compressed')
    t.same(gunzipSync(zipped.rawPayload), plain.rawPayload, 'the same bytes')
    for (const refusal of ['gzip;q=0', 'br;q=1, gzip;q=0.0', 'identity', '*;q=0, identity']) {
      const refused = await gateway.call(null, {
        method: 'GET',
        url: `/console/assets/${name}`,
        headers: { 'accept-encoding': refusal },
      })
      t.equal(refused.headers['content-encoding'], undefined, `Accept-Encoding: ${refusal}: not compressed`)
      t.same(refused.rawPayload, plain.rawPayload)
    }
    const again = await gateway.call(null, {
      method: 'GET',
      url: `/console/assets/${name}`,
      headers: { 'if-none-match': etag },
    })
    t.equal(again.statusCode, 304, 'a client that has it gets 304')
    t.equal(again.body, '')
  }
  const script = await gateway.call(null, {
    method: 'GET',
    url: `/console/assets/${names.find((n) => n.endsWith('.js'))}`,
  })
  t.ok(script.rawPayload.length > 10_000, 'the bundle has the UI in it')
  const head = await gateway.call(null, { method: 'HEAD', url: '/console' })
  t.equal(head.statusCode, 200, 'HEAD too')

  const pageAgain = await gateway.call(null, {
    method: 'GET',
    url: '/console',
    headers: { 'if-none-match': String(page.headers.etag) },
  })
  t.equal(pageAgain.statusCode, 304, 'the page revalidates by its ETag')
  const zippedPage = await gateway.call(null, {
    method: 'GET',
    url: '/console',
    headers: { 'accept-encoding': 'gzip' },
  })
  t.equal(gunzipSync(zippedPage.rawPayload).toString(), page.body, 'the page compressed')

  const unknown = await gateway.call(null, { method: 'GET', url: '/console/assets/console.old.js' })
  t.equal(unknown.statusCode, 404)
  t.equal(problemOf(unknown).code, 'route_not_found', 'an asset of another build: 404 route_not_found')
  const below = await gateway.call(null, { method: 'GET', url: '/console/other' })
  t.equal(problemOf(below).code, 'route_not_found')
})

t.test('with a catch-all route, the console path is never proxied while the console is on', async (t) => {
  const upstream = await startUpstream(t)
  const gateway = await startGateway(t, { listen: false, upstreamUrl: upstream.url })
  const parent = await gateway.createParent()
  t.equal((await gateway.call(parent.apiKey, { method: 'GET', url: '/console' })).statusCode, 200)
  // With its slash, as a browser's user may type it: sent to the page, its query kept.
  for (const [url, location] of [
    ['/console/', '/console'],
    ['/console/?tab=keys', '/console?tab=keys'],
  ]) {
    const res = await gateway.call(parent.apiKey, { method: 'GET', url })
    t.equal(res.statusCode, 308, `${url}: redirected`)
    t.equal(res.headers.location, location, `${url}: to the page`)
    t.equal(res.headers['cache-control'], 'no-cache', `${url}: not kept by browsers`)
  }
  for (const url of ['/console/x', '/Console/assets/x', '/console./x']) {
    const res = await gateway.call(parent.apiKey, { method: 'GET', url })
    t.equal(problemOf(res).code, 'route_not_found', `${url}: the gateway's, not proxied`)
  }
  t.equal(upstream.received.length, 0, 'the upstream got nothing')
  t.throws(
    () => loadRouteTable({ routes: [{ prefix: '/console', upstream: upstream.url }] }, undefined, true),
    ConfigError,
    'no route may take /console while the console is on',
  )
  t.equal(loadRouteTable({ routes: [{ prefix: '/console', upstream: upstream.url }] }, undefined, false).length, 1)
})

t.test('CONSOLE=off: no console, its path is like any other', async (t) => {
  const alone = await startGateway(t, { listen: false, env: { CONSOLE: 'off' } })
  const res = await alone.call(null, { method: 'GET', url: '/console' })
  t.equal(problemOf(res).code, 'route_not_found', 'without a catch-all: 404 route_not_found')
  t.equal(
    problemOf(await alone.call(null, { method: 'GET', url: '/console/assets/console.x.js' })).code,
    'route_not_found',
  )

  const upstream = await startUpstream(t)
  const proxied = await startGateway(t, { listen: false, env: { CONSOLE: 'off' }, upstreamUrl: upstream.url })
  const parent = await proxied.createParent()
  t.equal(
    problemOf(await proxied.call(null, { method: 'GET', url: '/console' })).code,
    'unauthenticated',
    'proxied: a key is needed',
  )
  for (const url of ['/console', '/console/']) {
    const passed = await proxied.call(parent.apiKey, { method: 'GET', url })
    t.equal(passed.statusCode, 200)
    t.equal(upstream.received.at(-1)?.url, url, `${url}: with a catch-all, proxied like any path`)
  }
})

t.test('CONSOLE is on or off', async (t) => {
  const env = { DATABASE_URL: 'postgres://x@127.0.0.1/x' }
  t.equal(loadConfig(env).console, true, 'on by default')
  t.equal(loadConfig({ ...env, CONSOLE: 'on' }).console, true)
  t.equal(loadConfig({ ...env, CONSOLE: 'off' }).console, false)
  t.throws(() => loadConfig({ ...env, CONSOLE: 'no' }), { variable: 'CONSOLE', message: /must be on or off, got "no"/ })
})

t.test('assets: prebuilt files first, else the bundle; a failure is tried again', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'console-assets-'))
  t.teardown(() => import('node:fs/promises').then((fs) => fs.rm(dir, { recursive: true, force: true })))
  t.equal(await readPrebuilt(new URL(`file://${dir}/`)), undefined, 'none built: undefined')
  await writeFile(join(dir, 'console.js'), 'console.log(1)')
  await writeFile(join(dir, 'console.css'), 'body{}')
  const prebuilt = await loadAssets(() => readPrebuilt(new URL(`file://${dir}/`)))
  t.equal(prebuilt.script.body.toString(), 'console.log(1)', 'the prebuilt script')
  t.match(prebuilt.style.name, /^console\.[\w-]{16}\.css$/)

  const broken = await mkdtemp(join(tmpdir(), 'console-assets-'))
  t.teardown(() => import('node:fs/promises').then((fs) => fs.rm(broken, { recursive: true, force: true })))
  await mkdir(join(broken, 'console.js'))
  await writeFile(join(broken, 'console.css'), 'body{}')
  await t.rejects(readPrebuilt(new URL(`file://${broken}/`)), { code: 'EISDIR' }, 'an unreadable build is an error')

  let calls = 0
  const failing = async (): Promise<ConsoleAssets> => {
    calls++
    throw new Error('bundle failed')
  }
  const { consolePlugin } = await import('../../src/console/plugin.js')
  const Fastify = (await import('fastify')).default
  const app = Fastify()
  await app.register(consolePlugin, { assets: failing })
  const res = await app.inject({ method: 'GET', url: '/console' })
  t.equal(res.statusCode, 500, 'a failing bundle is a 500')
  t.equal(calls, 1)
  await app.close()

  const shared = await consoleAssets()
  t.equal(await consoleAssets(), shared, 'bundled once per process')

  let attempts = 0
  const flaky = keptOnceLoaded(async () => {
    attempts++
    if (attempts === 1) throw new Error('first try fails')
    return attempts
  })
  await t.rejects(flaky(), /first try fails/)
  t.equal(await flaky(), 2, 'tried again after a failure')
  t.equal(await flaky(), 2, 'then kept')
})

t.test('the bundle holds the console, preact and uPlot only: the API types are erased', async (t) => {
  const { inputs } = await bundleConsole()
  t.ok(
    inputs.some((file) => file.endsWith('src/console/ui/types.ts') || file.endsWith('src/console/ui/main.tsx')),
    'the console itself is read',
  )
  const foreign = inputs.filter(
    (file) => !/(^|\/)src\/console\/ui\//.test(file) && !/(^|\/)node_modules\/(preact|uplot)\//.test(file),
  )
  t.same(foreign, [], 'no server module, no typebox in the bundle')
})

// How the gateway serves the sub-account portal's page (docs/portal.md, Serving), without a browser:
// the page links one script and one stylesheet by hash under /portal/assets, nothing inline; the
// assets cached for good, gzipped when asked; the bundle holds the console's UI and preact only.
// The page in a browser is portal.test.ts.
import { gunzipSync } from 'node:zlib'
import t from 'tap'
import { bundleConsole, portalAssets } from '../../src/console/assets.js'
import { portalCsp } from '../../src/portal/plugin.js'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

t.test('the page links its hashed script and stylesheet, nothing inline', async (t) => {
  const gateway = await startGateway(t, { listen: false })
  const page = await gateway.call(null, { method: 'GET', url: '/portal/' })
  t.equal(page.statusCode, 200)
  t.equal(page.headers['content-security-policy'], portalCsp(null))
  t.equal(page.headers['cache-control'], 'no-store')
  t.equal(page.headers['cross-origin-opener-policy'], 'same-origin', "no opener across origins, as the console's")
  t.notMatch(page.body, /<script>|<style|style=|https?:\/\//, 'nothing inline, nothing from another host')
  const names = [...page.body.matchAll(/\/portal\/assets\/(portal\.[\w-]+\.(?:js|css))/g)].map((m) => m[1]!)
  t.equal(names.length, 2, 'one script and one stylesheet')
  t.match(page.body, /<script type="module" src="\/portal\/assets\/portal\.[\w-]+\.js"><\/script>/)

  for (const name of names) {
    const plain = await gateway.call(null, { method: 'GET', url: `/portal/assets/${name}` })
    t.equal(plain.statusCode, 200, name)
    t.match(plain.headers['content-type'], name.endsWith('.js') ? /^text\/javascript/ : /^text\/css/)
    t.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable')
    t.match(plain.headers['content-security-policy'], /frame-ancestors 'none'/)
    const zipped = await gateway.call(null, {
      method: 'GET',
      url: `/portal/assets/${name}`,
      headers: { 'accept-encoding': 'gzip' },
    })
    t.equal(zipped.headers['content-encoding'], 'gzip')
    t.same(gunzipSync(zipped.rawPayload), plain.rawPayload, 'the same bytes')
    const again = await gateway.call(null, {
      method: 'GET',
      url: `/portal/assets/${name}`,
      headers: { 'if-none-match': String(plain.headers.etag) },
    })
    t.equal(again.statusCode, 304)
  }
  const unknown = await gateway.call(null, { method: 'GET', url: '/portal/assets/portal.old.js' })
  t.equal(problemOf(unknown).code, 'route_not_found', "another build's asset: 404")
  const consoles = await gateway.call(null, { method: 'GET', url: '/portal/assets/console.x.js' })
  t.equal(consoles.statusCode, 404, "the console's assets are not the portal's")
  const off = await startGateway(t, { listen: false, env: { CONSOLE: 'off' } })
  t.equal(problemOf(await off.call(null, { method: 'GET', url: '/portal/' })).code, 'route_not_found', 'CONSOLE=off')
})

t.test('/portal, without its slash, redirects to the page, its query kept, for no browser to keep', async (t) => {
  const gateway = await startGateway(t, { listen: false })
  for (const [url, location] of [
    ['/portal', '/portal/'],
    ['/portal?session=abc', '/portal/?session=abc'],
  ]) {
    const res = await gateway.call(null, { method: 'GET', url })
    t.equal(res.statusCode, 308, `${url}: redirected`)
    t.equal(res.headers.location, location, `${url}: to the page`)
    t.equal(res.headers['cache-control'], 'no-store', `${url}: not kept`)
  }
})

t.test("the portal's bundle: the console's UI and preact, no uPlot, no server module", async (t) => {
  const { inputs, script } = await bundleConsole('portal')
  t.ok(
    inputs.some((file) => file.endsWith('src/console/ui/portal/main.tsx')),
    'its entry',
  )
  t.ok(
    inputs.some((file) => file.endsWith('src/console/ui/components.tsx')),
    "the console's components",
  )
  t.ok(
    inputs.some((file) => file.endsWith('src/console/ui/console.css')),
    "the console's stylesheet",
  )
  const foreign = inputs.filter(
    (file) => !/(^|\/)src\/console\/ui\//.test(file) && !/(^|\/)node_modules\/preact\//.test(file),
  )
  t.same(foreign, [], 'nothing else')
  t.ok(script.byteLength < 60_000, `a small script (${script.byteLength} bytes)`)
  const assets = await portalAssets()
  t.equal(await portalAssets(), assets, 'bundled once per process')
  t.match(assets.script.name, /^portal\.[\w-]{16}\.js$/)
})

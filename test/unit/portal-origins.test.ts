// What a portal origin may be (src/portal/origin-changes.ts; docs/portal.md#security, operator
// input): an https origin and nothing else, since it is shown to browsers as a policy's source; a
// list stored before the strict check is read without its bad entries.
import t from 'tap'
import { httpsOrigin, storedPortalOrigins } from '../../src/portal/origin-changes.js'

t.test('https origins, as a browser serialises them', async (t) => {
  for (const [given, origin] of [
    ['https://a.example', 'https://a.example'],
    ['https://a.example/', 'https://a.example'],
    ['HTTPS://A.Example', 'https://a.example'],
    ['https://a.example:443', 'https://a.example'],
    ['https://b.example:8443/', 'https://b.example:8443'],
    ['https://xn--bcher-kva.example', 'https://xn--bcher-kva.example'],
    ['https://10.0.0.7:8443', 'https://10.0.0.7:8443'],
  ] as const)
    t.equal(httpsOrigin(given), origin, given)
})

t.test('anything else is none', async (t) => {
  for (const given of [
    '',
    'a.example',
    'http://a.example',
    'https://',
    'https://a.example/path',
    'https://a.example?x',
    'https://a.example#x',
    'https://u:p@a.example',
    'https://*.a.example',
    'https://a.example;sandbox',
    "https://a.example'",
    'https://a.example "x"',
    'https://a_b.example',
    'https://a.exa\tmple',
    'https://a.example\n',
    'https://a..example',
    'https://a.example.',
    'https://[::1]',
    'https://bücher.example',
    'https://a.example:99999',
    'https://a.example:',
  ])
    t.equal(httpsOrigin(given), null, JSON.stringify(given))
})

t.test('a stored list keeps its valid entries only', async (t) => {
  t.equal(storedPortalOrigins(null), null)
  t.same(storedPortalOrigins(['https://a.example', 'https://a.example;sandbox', 'https://B.example']), [
    'https://a.example',
  ])
  t.equal(storedPortalOrigins(['https://a.example;sandbox', "https://a.example'"]), null, 'none left: none')
})

// Prefix shadows (docs/api.md, Proxied requests): a path that reaches a shorter route only because
// the router matches prefixes exactly, while a folding upstream would read it as a longer route's.
import t from 'tap'
import { FoldedPrefixes, foldSegment, prefixShadowCheck } from '../../src/proxy/prefix-shadow.js'

const TABLE = ['/v1/shipments', '/v1/shipments/labels', '/hop', '/v1', '/']

t.test('foldSegment: decoded, lower case, trailing dots and spaces dropped', async (t) => {
  t.equal(foldSegment('Shipments'), 'shipments')
  t.equal(foldSegment('shipments.'), 'shipments')
  t.equal(foldSegment('shipments. .'), 'shipments')
  t.equal(foldSegment('shipments%20'), 'shipments')
  t.equal(foldSegment('shipments%2E%2e'), 'shipments')
  t.equal(foldSegment('%73hipments'), 'shipments')
  t.equal(foldSegment('.shipments'), '.shipments', 'leading dots stay')
  t.equal(foldSegment('ship ments'), 'ship ments', 'inner spaces stay')
  t.equal(foldSegment('shipments%zz'), 'shipments%zz', 'a broken encoding is compared as it is')
  t.equal(foldSegment(''), '')
  t.equal(foldSegment('%C5%BFhipments'), 'shipments', 'long s reads as s')
  t.equal(foldSegment('sh%C4%B1pments'), 'shipments', 'dotless i reads as i')
  t.equal(foldSegment('%EF%BD%93hipments'), 'shipments', 'fullwidth s reads as s')
  t.equal(foldSegment('%E2%84%AAeys'), 'keys', 'the Kelvin sign reads as k')
  t.equal(foldSegment('%2573hipments'), 'shipments', 'decoded twice')
  t.equal(foldSegment('%252573hipments'), '%73hipments', 'not three times')
  // Unicode spaces and default-ignorable code points at the end, as trimming upstreams drop them.
  for (const end of [
    '%E1%9A%80',
    '%E2%80%A8',
    '%E2%80%A9',
    '%EF%BB%BF',
    '%C2%85',
    '%C2%AD',
    '%E1%A0%8E',
    '%E2%80%8B',
    '%E2%80%8F',
    '%E2%81%A0',
    '%E3%80%80',
    '%C2%A0.%E2%80%8B',
  ])
    t.equal(foldSegment(`orders${end}`), 'orders', `a trailing ${end} is dropped`)
  t.equal(foldSegment('ord%C2%ADers'), 'ord\u00aders', 'only at the end')
})

t.test('the catch-all: every spelling of a longer prefix is a shadow', async (t) => {
  const shadows = prefixShadowCheck('/', TABLE)
  for (const path of [
    '/v1/Shipments',
    '/v1/Shipments/x',
    '/V1/shipments/x',
    '/v1/SHIPMENTS/x?y',
    '/v1/shipments./x',
    '/v1/shipments.',
    '/v1/shipments%20/x',
    '/v1/shipments%2e/x',
    '/v1/shipments%2E%20',
    '/v1/shipments .. /x',
    '/v1./shipments/x',
    '/V1',
    '/v1.',
    '/v1%20/x',
    '/HOP',
    '/hop./x',
  ])
    t.ok(shadows(path), `${path} shadows a configured prefix`)
  for (const path of ['/', '/v2/shipments', '/v1x/shipments', '/hopx', '/h/op', '/x/v1', '/%20v1/x', '/.hop'])
    t.notOk(shadows(path), `${path} shadows nothing`)
})

t.test('a shorter route: only the longer prefixes below it count', async (t) => {
  const shadows = prefixShadowCheck('/v1', TABLE)
  t.ok(shadows('/v1/Shipments/x'))
  t.ok(shadows('/v1/shipments%20'))
  t.notOk(shadows('/v1/shipmentsx/y'), 'a genuinely different segment')
  t.notOk(shadows('/v1/x'))
  t.notOk(shadows('/v1'))
  const middle = prefixShadowCheck('/v1/shipments', TABLE)
  t.ok(middle('/v1/shipments/Labels/1'))
  t.ok(middle('/v1/shipments/labels./1'))
  t.notOk(middle('/v1/shipments/1'))
  t.notOk(middle('/v1/shipments/labelsx'))
})

t.test('the longest route for its path checks nothing', async (t) => {
  const none = prefixShadowCheck('/v1/shipments/labels', TABLE)
  t.notOk(none('/v1/shipments/labels/anything'))
  t.notOk(prefixShadowCheck('/hop', TABLE)('/hop/HOP'))
  t.notOk(prefixShadowCheck('/', ['/'])('/v1/Shipments'), 'a catch-all alone has nothing to shadow')
})

t.test('FoldedPrefixes: whole segments, at any depth below a member', async (t) => {
  const reserved = new FoldedPrefixes(['/v1/sub-accounts', '/docs'])
  t.ok(reserved.covers('/v1/sub-accounts'))
  t.ok(reserved.covers('/v1/sub-accounts/'))
  t.ok(reserved.covers('/V1/Sub-Accounts./x/y'))
  t.ok(reserved.covers('/docs%20/x'))
  t.notOk(reserved.covers('/v1/sub-accountsx'))
  t.notOk(reserved.covers('/v1'))
  t.notOk(reserved.covers('/'))
  t.notOk(reserved.covers(''))
})

t.test('FoldedPrefixes: a path folding leaves as it is gives the answer its folded walk gives', async (t) => {
  // Configured prefixes fold too: a plain path may lie under `/V1/Orders.` once that is folded.
  const prefixes = new FoldedPrefixes(['/V1/Orders.', '/v1/shipments/labels', '/docs'], 1)
  t.ok(prefixes.covers('/v1/orders'))
  t.ok(prefixes.covers('/v1/orders/x'))
  t.ok(prefixes.covers('/v1/shipments/labels/9'))
  t.notOk(prefixes.covers('/docs/x'), 'not past fromDepth')
  t.notOk(prefixes.covers('/v1/shipments/x'))
  // Against every segment folded by hand, over paths with and without characters that fold.
  const segments = ['v1', 'V1', 'orders', 'orders.', 'shipments', 'labels', 'x', 'docs', '']
  const folded = new Set(['/v1/orders', '/v1/shipments/labels'])
  for (const a of segments)
    for (const b of segments)
      for (const c of segments) {
        const path = `/${a}/${b}/${c}`
        const parts = path.split('/').slice(1).map(foldSegment)
        const expected = [2, 3].some((depth) => folded.has(`/${parts.slice(0, depth).join('/')}`))
        t.equal(prefixes.covers(path), expected, path)
      }
})

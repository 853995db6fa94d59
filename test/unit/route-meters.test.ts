// A route's units as the route table reads them (docs/configuration.md, `cost` and `meters`): a
// plain function, no I/O.
import t from 'tap'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import { refuses, second, UP, WHERE } from '../helpers/route-table.js'

t.test('cost and meters: the units a route counts (docs/configuration.md)', async (t) => {
  const route = loadRouteTable(
    second({
      cost: 3,
      meters: [
        { name: 'tokens', header: 'X-Tokens-Used' },
        { name: 'images_2', header: 'x-images', expose: true },
      ],
    }),
    undefined,
  )[1]
  t.equal(route!.cost, 3)
  t.same(
    route!.meters,
    [
      { name: 'tokens', header: 'x-tokens-used', expose: false },
      { name: 'images_2', header: 'x-images', expose: true },
    ],
    'headers lower-cased; expose false unless set',
  )
  t.ok(Object.isFrozen(route!.meters) && route!.meters.every((m) => Object.isFrozen(m)), 'frozen')
  t.same(loadRouteTable(second({ cost: 1_000_000 }), undefined)[1]!.cost, 1_000_000, 'the largest cost')
  const [catchAll] = loadRouteTable({}, UP)
  t.same([catchAll!.cost, catchAll!.meters], [1, []], "UPSTREAM_URL's route: cost 1, no meters")

  const eight = Array.from({ length: 8 }, (_, i) => ({ name: `m${i}`, header: `x-m${i}` }))
  t.equal(loadRouteTable(second({ meters: eight }), undefined)[1]!.meters.length, 8, 'eight meters')
  for (const [name, route, mentions] of [
    ['cost 0', { cost: 0 }, /cost must be a whole number from 1 to 1000000/],
    ['cost over 10^6', { cost: 1_000_001 }, /cost must be/],
    ['cost 1.5', { cost: 1.5 }, /cost must be/],
    ['cost as a string', { cost: '2' }, /cost must be/],
    ['meters not a list', { meters: { name: 'tokens' } }, /meters must be a list/],
    ['nine meters', { meters: [...eight, { name: 'm8', header: 'x-m8' }] }, /at most 8 meters/],
    ['a meter not a mapping', { meters: ['tokens'] }, /meters\[0\] must be a mapping/],
    ['a meter without a name', { meters: [{ header: 'x-t' }] }, /meters\[0\]\.name must match/],
    ['an upper-case name', { meters: [{ name: 'Tokens', header: 'x-t' }] }, /meters\[0\]\.name must match/],
    ['a name of 33 characters', { meters: [{ name: `t${'x'.repeat(32)}`, header: 'x-t' }] }, /\.name must match/],
    ['the requests meter', { meters: [{ name: 'requests', header: 'x-t' }] }, /may not be requests/],
    ['no header', { meters: [{ name: 'tokens' }] }, /meters\[0\]\.header must be a header name/],
    ['a header with a space', { meters: [{ name: 'tokens', header: 'x t' }] }, /\.header must be a header name/],
    ['Content-Length', { meters: [{ name: 'tokens', header: 'Content-Length' }] }, /may not be content-length/],
    ['Transfer-Encoding', { meters: [{ name: 'tokens', header: 'transfer-encoding' }] }, /may not be/],
    ['__proto__', { meters: [{ name: 'tokens', header: '__proto__' }] }, /may not be __proto__/],
    ['constructor', { meters: [{ name: 'tokens', header: 'Constructor' }] }, /may not be constructor/],
    ['expose not a boolean', { meters: [{ name: 'tokens', header: 'x-t', expose: 'yes' }] }, /expose must be true/],
    ['an unknown meter key', { meters: [{ name: 'tokens', header: 'x-t', unit: 'k' }] }, /unknown key "unit"/],
    [
      'a name twice',
      {
        meters: [
          { name: 'tokens', header: 'x-a' },
          { name: 'tokens', header: 'x-b' },
        ],
      },
      /meters\[1\]\.name duplicates meter tokens/,
    ],
    [
      'a header twice, in two spellings',
      {
        meters: [
          { name: 'a', header: 'X-Used' },
          { name: 'b', header: 'x-used' },
        ],
      },
      /meters\[1\]\.header is meter a's already/,
    ],
    ['on a public route', { public: true, cost: 2 }, /a public route counts no usage/],
    ['meters on a public route', { public: true, meters: [{ name: 'a', header: 'x-a' }] }, /public route/],
  ] as const)
    refuses(t, second(route), WHERE, name, undefined, mentions)
})

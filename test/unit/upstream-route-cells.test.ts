// A route's cells in the route table (docs/configuration.md, routes: `cells`, `default_cell`):
// what is read, a cell's targets parsed as a route's are, and each mistake refused at boot with a
// line that names the route and the field; and a tenant's cell (cellOf).
import t from 'tap'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import { cellOf } from '../../src/proxy/upstreams/route-cells.js'
import { refuses, second, UP, WHERE } from '../helpers/route-table.js'

const EU = 'http://eu.internal:8080/api'
const US = 'http://us.internal:8080/api'

t.test('cells instead of targets, with a default cell', async (t) => {
  const [, route] = loadRouteTable(
    second({
      upstream: undefined,
      cells: {
        eu: { targets: [{ url: EU }, { url: 'http://eu2.internal:8080/api', weight: 2 }], balance: 'round_robin' },
        'us-east-1': { targets: [{ url: US }], outlier: { eject_after: 2 } },
      },
      default_cell: 'eu',
    }),
    undefined,
  )
  const cells = route!.cells!
  t.same([...cells.cells.keys()], ['eu', 'us-east-1'])
  t.same(cells.cells.get('eu'), {
    targets: [
      { url: EU, weight: 1 },
      { url: 'http://eu2.internal:8080/api', weight: 2 },
    ],
    balance: 'round_robin',
    outlier: { ejectAfter: 5, maxEjectedPercent: 50 },
    healthCheck: null,
  })
  t.same(cells.cells.get('us-east-1')!.outlier, { ejectAfter: 2, maxEjectedPercent: 50 })
  t.equal(cells.defaultCell, 'eu')
  t.equal(cells.ownUpstream, false)
  t.equal(route!.upstream, EU, "upstream is the default cell's first target")
  t.equal(route!.targets, null)
})

t.test('cells beside an upstream, no default cell', async (t) => {
  const [first, route] = loadRouteTable(second({ cells: { us: { targets: [{ url: `${UP}/` }] } } }), undefined)
  t.equal(first!.cells, null, 'a route without cells')
  t.equal(route!.cells!.defaultCell, null)
  t.equal(route!.cells!.ownUpstream, true)
  t.equal(route!.upstream, UP)
})

t.test('every mistake is refused, naming the route and the field', async (t) => {
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['cells not a mapping', { cells: [] }, /cells must be a mapping of 1 to 32/],
    ['no cells', { cells: {} }, /cells must be a mapping of 1 to 32/],
    ['a bad name', { cells: { EU: { targets: [{ url: EU }] } } }, /"EU" is not a cell name/],
    ['a name too long', { cells: { [`a${'b'.repeat(32)}`]: { targets: [{ url: EU }] } } }, /is not a cell name/],
    ['a cell not a mapping', { cells: { eu: [EU] } }, /cells\.eu must be a mapping with targets/],
    ['a cell without targets', { cells: { eu: { balance: 'round_robin' } } }, /cells\.eu\.targets is required/],
    ['an unknown key', { cells: { eu: { targets: [{ url: EU }], weight: 1 } } }, /cells\.eu: unknown key "weight"/],
    ['a bad target', { cells: { eu: { targets: [{ url: 'eu:80' }] } } }, /cells\.eu\.targets\[0\]\.url/],
    ['a bad balance', { cells: { eu: { targets: [{ url: EU }], balance: 'random' } } }, /cells\.eu\.balance must be/],
    [
      'another base path',
      { cells: { eu: { targets: [{ url: `${UP}/other` }] } } },
      /cells\.eu\.targets\[0\]\.url must have the scheme and base path/,
    ],
    ['default_cell without cells', { default_cell: 'eu' }, /default_cell needs cells/],
    [
      'default_cell not a cell',
      { cells: { eu: { targets: [{ url: UP }] } }, default_cell: 'us' },
      /one of cells \(eu\)/,
    ],
    [
      'no upstream and no default cell',
      { upstream: undefined, cells: { eu: { targets: [{ url: EU }] } } },
      /needs default_cell/,
    ],
    [
      'tenant_hash on a public route',
      { public: true, cells: { eu: { targets: [{ url: UP }], balance: 'tenant_hash' } } },
      /cells\.eu\.balance tenant_hash needs a keyed route/,
    ],
  ]
  for (const [name, route, message] of cases) refuses(t, second(route), WHERE, name, undefined, message)
})

t.test("a tenant's cell: its own, else its parent's, else the route's", async (t) => {
  t.equal(cellOf({ placement: 'us' }, { placement: 'eu' }, 'asia'), 'us')
  t.equal(cellOf({ placement: null }, { placement: 'eu' }, 'asia'), 'eu')
  t.equal(cellOf({}, { placement: null }, 'asia'), 'asia', 'a record cached before cells: none')
  t.equal(cellOf({ placement: null }, null, null), null)
})

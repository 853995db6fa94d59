// A route's targets and their options in the route table (docs/configuration.md, routes:
// `targets`, `balance`, `outlier`, `health_check`): what is read, the defaults, and each mistake
// refused at boot with a line that names the route and the field.
import t from 'tap'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import { refuses, second, WHERE } from '../helpers/route-table.js'

const A = 'http://a.internal:8080/api'
const B = 'http://b.internal:8080/api/'

t.test('targets, with their defaults', async (t) => {
  const [, route] = loadRouteTable(
    second({ upstream: undefined, targets: [{ url: A }, { url: B, weight: 3 }] }),
    undefined,
  )
  t.same(route!.targets, {
    targets: [
      { url: A, weight: 1 },
      { url: 'http://b.internal:8080/api', weight: 3 },
    ],
    balance: 'least_request',
    outlier: { ejectAfter: 5, maxEjectedPercent: 50 },
    healthCheck: null,
  })
  t.equal(route!.upstream, A, "upstream is the first target's URL: the scheme and base path of all")
  const [first] = loadRouteTable(second({}), undefined)
  t.equal(first!.targets, null, 'a route with one upstream has no targets')
})

t.test('every option set', async (t) => {
  const [, route] = loadRouteTable(
    second({
      upstream: undefined,
      targets: [{ url: A }],
      balance: 'tenant_hash',
      outlier: { eject_after: 3, max_ejected_percent: 100 },
      health_check: {
        path: '/healthz?deep=1',
        interval_ms: 5000,
        timeout_ms: 500,
        healthy_after: 4,
        unhealthy_after: 1,
        statuses: [200, 204],
      },
    }),
    undefined,
  )
  t.same(route!.targets, {
    targets: [{ url: A, weight: 1 }],
    balance: 'tenant_hash',
    outlier: { ejectAfter: 3, maxEjectedPercent: 100 },
    healthCheck: {
      path: '/healthz?deep=1',
      intervalMs: 5000,
      timeoutMs: 500,
      healthyAfter: 4,
      unhealthyAfter: 1,
      statuses: [200, 204],
    },
  })
  const [, defaults] = loadRouteTable(
    second({ upstream: undefined, targets: [{ url: A }], health_check: { path: '/h' } }),
    undefined,
  )
  t.same(defaults!.targets!.healthCheck, {
    path: '/h',
    intervalMs: 10_000,
    timeoutMs: 2000,
    healthyAfter: 2,
    unhealthyAfter: 3,
    statuses: null,
  })
})

t.test('mistakes are refused, naming the route and the field', async (t) => {
  const targets = (list: unknown, more: Record<string, unknown> = {}) =>
    second({ upstream: undefined, targets: list, ...more })
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['both upstream and targets', second({ targets: [{ url: A }] }), /either upstream .* or targets/],
    ['an empty list', targets([]), /targets must be a list of 1 to 64/],
    ['not a list', targets({ url: A }), /targets must be a list/],
    ['65 targets', targets(Array.from({ length: 65 }, (_, i) => ({ url: `http://t${i}:80` }))), /1 to 64/],
    ['a target not a mapping', targets([A]), /targets\[0\] must be a mapping/],
    ['an unknown key', targets([{ url: A, wieght: 2 }]), /targets\[0\]: unknown key "wieght"/],
    ['a bad URL', targets([{ url: A }, { url: 'b.internal:80' }]), /targets\[1\]\.url .*write the scheme first/],
    ['credentials', targets([{ url: 'http://u:p@a:80' }]), /targets\[0\]\.url may not carry credentials/],
    ['no URL', targets([{ weight: 2 }]), /targets\[0\]\.url must be an http or https URL/],
    ['weight 0', targets([{ url: A, weight: 0 }]), /targets\[0\]\.weight must be a whole number from 1 to 1000/],
    ['weight 1001', targets([{ url: A, weight: 1001 }]), /from 1 to 1000/],
    ['weight 1.5', targets([{ url: A, weight: 1.5 }]), /whole number/],
    ['a target twice', targets([{ url: A }, { url: `${A}/` }]), /targets\[1\]\.url names a target already listed/],
    [
      'another scheme',
      targets([{ url: A }, { url: 'https://b:8443/api' }]),
      /targets\[1\]\.url must have the scheme and base path of targets\[0\]/,
    ],
    ['another base path', targets([{ url: A }, { url: 'http://b:8080/v2' }]), /scheme and base path/],
    [
      'an unknown balance',
      targets([{ url: A }], { balance: 'random' }),
      /balance must be one of least_request, round_robin, tenant_hash/,
    ],
    [
      'tenant_hash on a public route',
      targets([{ url: A }], { balance: 'tenant_hash', public: true }),
      /tenant_hash needs a keyed route/,
    ],
    ['balance without targets', second({ balance: 'round_robin' }), /balance needs targets/],
    ['outlier without targets', second({ outlier: {} }), /outlier needs targets/],
    ['health_check without targets', second({ health_check: { path: '/h' } }), /health_check needs targets/],
    ['outlier not a mapping', targets([{ url: A }], { outlier: 5 }), /outlier must be a mapping/],
    ['an unknown outlier key', targets([{ url: A }], { outlier: { eject: 2 } }), /outlier: unknown key "eject"/],
    [
      'eject_after 0',
      targets([{ url: A }], { outlier: { eject_after: 0 } }),
      /outlier\.eject_after must be a whole number from 1 to 1000/,
    ],
    [
      'max_ejected_percent 101',
      targets([{ url: A }], { outlier: { max_ejected_percent: 101 } }),
      /outlier\.max_ejected_percent must be a whole number from 0 to 100/,
    ],
    ['health_check not a mapping', targets([{ url: A }], { health_check: '/h' }), /health_check must be a mapping/],
    [
      'an unknown health_check key',
      targets([{ url: A }], { health_check: { path: '/h', every: 1 } }),
      /health_check: unknown key "every"/,
    ],
    ['no path', targets([{ url: A }], { health_check: {} }), /health_check\.path must be a path starting with \//],
    ['a path with a space', targets([{ url: A }], { health_check: { path: '/a b' } }), /health_check\.path/],
    [
      'interval_ms 999',
      targets([{ url: A }], { health_check: { path: '/h', interval_ms: 999 } }),
      /health_check\.interval_ms must be a whole number from 1000/,
    ],
    [
      'timeout_ms over interval_ms',
      targets([{ url: A }], { health_check: { path: '/h', interval_ms: 1000, timeout_ms: 1001 } }),
      /health_check\.timeout_ms must be a whole number from 1 to 1000/,
    ],
    [
      'healthy_after 0',
      targets([{ url: A }], { health_check: { path: '/h', healthy_after: 0 } }),
      /health_check\.healthy_after/,
    ],
    [
      'unhealthy_after 0',
      targets([{ url: A }], { health_check: { path: '/h', unhealthy_after: 0 } }),
      /health_check\.unhealthy_after/,
    ],
    [
      'statuses empty',
      targets([{ url: A }], { health_check: { path: '/h', statuses: [] } }),
      /health_check\.statuses must be a list of HTTP statuses from 200 to 599/,
    ],
    [
      'statuses not numbers',
      targets([{ url: A }], { health_check: { path: '/h', statuses: ['200'] } }),
      /from 200 to 599/,
    ],
    ['statuses 100', targets([{ url: A }], { health_check: { path: '/h', statuses: [100] } }), /from 200 to 599/],
  ]
  for (const [name, doc, mentions] of cases) refuses(t, doc, WHERE, name, undefined, mentions)
})

// The route table of docs/configuration.md (config/gateway.yaml plus UPSTREAM_URL) as a plain
// function: no I/O.
import t from 'tap'
import { type ProxyRoute, scopesFor } from '../../src/proxy/route.js'
import {
  DEFAULT_BODY_IDLE_TIMEOUT_MS,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_MAX_CONNECTIONS,
  DEFAULT_RESPONSE_IDLE_TIMEOUT_MS,
  DEFAULT_TIMEOUT_MS,
} from '../../src/proxy/route-limits.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import { DEFAULT_RETRIES } from '../../src/proxy/upstreams/retry-options.js'

import { configError, refuses, second, UP, WHERE } from '../helpers/route-table.js'

/** The time, size and connection limits every route has when nothing sets them, and its units. */
const DEFAULT_LIMITS = {
  targets: null,
  cells: null,
  retries: DEFAULT_RETRIES,
  cost: 1,
  meters: [],
  cors: null,
  timeoutMs: DEFAULT_TIMEOUT_MS,
  maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
  maxConnections: DEFAULT_MAX_CONNECTIONS,
  maxConnectionsPerTenant: 64,
  maxConnectionsPerAccount: 128,
  bodyIdleTimeoutMs: DEFAULT_BODY_IDLE_TIMEOUT_MS,
  responseIdleTimeoutMs: DEFAULT_RESPONSE_IDLE_TIMEOUT_MS,
}

t.test('a valid table', async (t) => {
  const routes = loadRouteTable(
    {
      routes: [
        {
          prefix: '/v1/shipments',
          upstream: 'http://shipments:8080',
          scopes: { read: ['tracking:read'], write: ['tracking:write', 'tracking:admin'] },
        },
        { prefix: '/health/upstream', upstream: 'https://shipments.internal/base/', public: true },
        {
          prefix: '/v1/files',
          upstream: 'http://files:9000',
          forward_authorization: true,
          timeout_ms: 5000,
          max_body_bytes: 1024,
          pass_headers: ['X-Real-IP', 'forwarded'],
        },
      ],
    },
    undefined,
  )
  t.equal(routes.length, 3, 'no catch-all without UPSTREAM_URL')
  t.same(routes[0], {
    prefix: '/v1/shipments',
    upstream: 'http://shipments:8080',
    scopes: { read: ['tracking:read'], write: ['tracking:write', 'tracking:admin'] },
    public: false,
    sameOriginDocuments: false,
    forwardAuthorization: false,
    ...DEFAULT_LIMITS,
    passHeaders: new Set(),
    identity: null,
    websocket: null,
  })
  t.same(
    routes[1],
    {
      prefix: '/health/upstream',
      upstream: 'https://shipments.internal/base',
      scopes: { read: [], write: [] },
      public: true,
      sameOriginDocuments: false,
      forwardAuthorization: false,
      ...DEFAULT_LIMITS,
      passHeaders: new Set(),
      identity: null,
      websocket: null,
    },
    'the base path is kept without its trailing slash',
  )
  t.match(routes[2], { prefix: '/v1/files', forwardAuthorization: true, timeoutMs: 5000, maxBodyBytes: 1024 })
  t.same([...routes[2]!.passHeaders], ['x-real-ip', 'forwarded'], 'pass_headers, lower-cased')
  t.ok(
    routes.every((route) => Object.isFrozen(route)),
    'routes are frozen',
  )

  t.same(loadRouteTable({}, undefined), [], 'an empty document: no routes')
  t.same(loadRouteTable({ routes: [] }, undefined), [], 'an empty list: no routes')
  const punctuated = loadRouteTable({ routes: [{ prefix: "/v1/a.b_c~d-e/f!$&'()+,=@g", upstream: UP }] }, undefined)
  t.equal(punctuated[0]!.prefix, "/v1/a.b_c~d-e/f!$&'()+,=@g", 'unreserved and sub-delim characters are fine')
})

t.test('defaults and overrides', async (t) => {
  t.equal(DEFAULT_TIMEOUT_MS, 30_000)
  t.equal(DEFAULT_MAX_BODY_BYTES, 10 * 1024 * 1024)
  t.equal(DEFAULT_MAX_CONNECTIONS, 256)
  t.equal(DEFAULT_BODY_IDLE_TIMEOUT_MS, 10_000)
  t.equal(DEFAULT_RESPONSE_IDLE_TIMEOUT_MS, 30_000)

  const defaults = loadRouteTable({ routes: [{ prefix: '/a', upstream: UP }] }, UP)
  for (const route of defaults) {
    t.equal(route.timeoutMs, 30_000, `${route.prefix}: timeout_ms 30000`)
    t.equal(route.maxBodyBytes, 10_485_760, `${route.prefix}: max_body_bytes 10 MiB`)
  }

  const table = loadRouteTable(
    {
      timeout_ms: 1234,
      max_body_bytes: 4096,
      routes: [
        { prefix: '/inherits', upstream: UP },
        { prefix: '/own', upstream: UP, timeout_ms: 99, max_body_bytes: 7 },
        { prefix: '/half', upstream: UP, max_body_bytes: 8 },
      ],
    },
    'http://catch-all:1',
  )
  t.same(
    table.map((route) => [route.prefix, route.timeoutMs, route.maxBodyBytes]),
    [
      ['/inherits', 1234, 4096],
      ['/own', 99, 7],
      ['/half', 1234, 8],
      ['/', 1234, 4096],
    ],
    'top-level values are the default of every route, the catch-all included; a route overrides each on its own',
  )
})

t.test('UPSTREAM_URL adds a catch-all, last', async (t) => {
  const routes = loadRouteTable(
    {
      routes: [
        { prefix: '/v1/a', upstream: UP },
        { prefix: '/v1/b', upstream: UP, public: true },
      ],
    },
    'https://backend.internal:8443/api/',
  )
  t.same(
    routes.map((route) => route.prefix),
    ['/v1/a', '/v1/b', '/'],
  )
  t.same(routes[2], {
    prefix: '/',
    upstream: 'https://backend.internal:8443/api',
    scopes: { read: [], write: [] },
    public: false,
    sameOriginDocuments: false,
    forwardAuthorization: false,
    ...DEFAULT_LIMITS,
    passHeaders: new Set(),
    identity: null,
    websocket: null,
  })
  t.same(
    loadRouteTable({}, 'http://only:1').map((route) => [route.prefix, route.upstream]),
    [['/', 'http://only:1']],
    'UPSTREAM_URL alone',
  )

  const root = loadRouteTable({ routes: [{ prefix: '/', upstream: UP }] }, undefined)
  t.same(
    root.map((route) => route.prefix),
    ['/'],
    '/ in the table without UPSTREAM_URL is the catch-all',
  )

  for (const bad of ['not a url', 'ftp://files:21', 'http://user:pass@backend:1', 'http://backend:1/?x=1']) {
    const err = configError(t, () => loadRouteTable({}, bad), `UPSTREAM_URL ${bad}`)
    t.ok(err?.message.includes('UPSTREAM_URL'), `UPSTREAM_URL ${bad}: named in ${err?.message}`)
  }
})

t.test('unknown keys', async (t) => {
  refuses(t, { routes: [], retries: 3 }, 'top level', 'top level', undefined, /"retries"/)
  refuses(t, second({ strip_prefix: true }), WHERE, 'in a route', undefined, /"strip_prefix"/)
  refuses(t, second({ scopes: { read: [], write: [], admin: ['x:y'] } }), WHERE, 'in scopes', undefined, /"admin"/)
  refuses(t, second({ Prefix: '/v1/y' }), WHERE, 'keys are case-sensitive', undefined, /"Prefix"/)
})

t.test("the console's and the portal's paths: refused while the console is on, saying how to free them", async (t) => {
  for (const prefix of ['/console', '/Console/x', '/portal'])
    t.throws(
      () => loadRouteTable({ routes: [{ prefix, upstream: UP }] }, undefined, true),
      {
        message:
          /served by the gateway itself: the web console's \(\/console\) or the portal's \(\/portal\); set CONSOLE=off/,
      },
      prefix,
    )
  t.doesNotThrow(() => loadRouteTable({ routes: [{ prefix: '/console', upstream: UP }] }, undefined, false))
  t.throws(() => loadRouteTable({ routes: [{ prefix: '/healthz', upstream: UP }] }, undefined, true), {
    message: /prefix is served by the gateway itself$/,
  })
})

t.test('bad upstream URLs', async (t) => {
  const cases: [unknown, string][] = [
    ['not a url', 'not a URL'],
    ['shipments:8080', 'no scheme'],
    ['ftp://shipments:21', 'ftp://'],
    ['file:///etc/passwd', 'file://'],
    ['http://user:secret@shipments:8080', 'with credentials'],
    ['http://user@shipments:8080', 'with a user name'],
    ['http://shipments:8080/base?token=1', 'with a query'],
    ['http://shipments:8080/#frag', 'with a fragment'],
    [42, 'a number'],
    ['', 'empty'],
  ]
  for (const [upstream, name] of cases) {
    refuses(t, second({ upstream }), WHERE, `upstream ${name}`)
  }
  // Without an upstream (nor targets), a route is only decided for (AUTHZ_PORT, docs/forward-auth.md).
  const [, decided] = loadRouteTable({ routes: [{ prefix: '/v1/ok', upstream: UP }, { prefix: '/v1/x' }] }, undefined)
  t.equal(decided!.upstream, null, 'upstream absent: decided only')
  refuses(
    t,
    second({ upstream: undefined, websocket: true }),
    WHERE,
    'websocket, no upstream',
    undefined,
    /websocket needs an upstream/,
  )
  refuses(
    t,
    second({ upstream: undefined, meters: [{ name: 'tokens', header: 'x-tokens' }] }),
    WHERE,
    'meters, no upstream',
    undefined,
    /meters need an upstream/,
  )
  for (const hostAndPort of ['shipments:8080', '127.0.0.1:9000'])
    refuses(
      t,
      second({ upstream: hostAndPort }),
      WHERE,
      `${hostAndPort}: says to write the scheme first`,
      undefined,
      /write the scheme first, as in http:\/\/127\.0\.0\.1:9000$/,
    )
  const withSecret = configError(
    t,
    () => loadRouteTable(second({ upstream: 'http://user:hunter2@shipments:8080' }), undefined),
    'credentials',
  )
  t.notMatch(withSecret?.message ?? '', /hunter2/, 'the password is not echoed')
  // Nor when the URL does not parse at all (config-readers.ts: "Never echo the value: a connection
  // string may carry a password"); the message goes to the logs of every failed start.
  for (const upstream of ['http://user:hunter2@shipments:99999', 'http://user:hunter2@ship ments:80']) {
    const unparsable = configError(t, () => loadRouteTable(second({ upstream }), undefined), `unparsable ${upstream}`)
    t.notMatch(unparsable?.message ?? '', /hunter2/, `${upstream}: the password is not echoed`)
  }
})

t.test('bad prefixes', async (t) => {
  const cases: [unknown, string][] = [
    ['v1/x', 'no leading slash'],
    ['/v1/x/', 'a trailing slash'],
    ['/v1/:id', 'a :param'],
    ['/v1/*', 'a wildcard'],
    ['/v1/a*b', 'a * inside a segment'],
    ['/v1/../x', 'a .. segment'],
    ['/v1/./x', 'a . segment'],
    ['/v1/%2e', 'a %'],
    ['/v1/a%20b', 'a % escape'],
    ['/v1/x;y', 'a ;'],
    ['/v1//x', 'an empty segment'],
    ['', 'empty'],
    ['/v1/a b', 'a space'],
    ['/v1/a?b', 'a ?'],
    ['/v1/a#b', 'a #'],
    ['/v1/a\\b', 'a backslash'],
    ['/v1/a\nb', 'a newline (the message stays one line)'],
    [7, 'a number'],
  ]
  for (const [prefix, name] of cases) {
    const doc = {
      routes: [
        { prefix: '/v1/ok', upstream: UP },
        { prefix, upstream: UP },
      ],
    }
    // A newline is named escaped, so that the message stays one line.
    refuses(
      t,
      doc,
      typeof prefix === 'string' ? `routes[1] (${prefix.replace('\n', '\\n')})` : 'routes[1]',
      `prefix ${name}`,
    )
  }
  refuses(t, { routes: [{ prefix: '/v1/ok', upstream: UP }, { upstream: UP }] }, 'routes[1]', 'prefix absent')
  refuses(t, { routes: [{ prefix: '/v1/ok', upstream: UP }, 'http://x'] }, 'routes[1]', 'a route that is not a mapping')
  refuses(t, { routes: { prefix: '/v1/ok', upstream: UP } }, 'top level', 'routes that is not a list')
})

t.test('a bad prefix is refused naming every character a segment may hold', async (t) => {
  const error = configError(
    t,
    () => loadRouteTable({ routes: [{ prefix: '/v1/a b', upstream: UP }] }, undefined),
    'a space',
  )
  // docs/configuration.md lists the same set: a user told "only . _ ~ -" would rename a valid prefix.
  for (const ch of ['.', '_', '~', '!', '$', '&', "'", '(', ')', '+', ',', '=', '@', '-']) {
    t.ok(error?.message.includes(` ${ch} `), `the message names ${ch}`)
  }
})

t.test('duplicate prefixes', async (t) => {
  refuses(
    t,
    {
      routes: [
        { prefix: '/v1/a', upstream: UP },
        { prefix: '/v1/b', upstream: UP },
        { prefix: '/v1/a', upstream: 'http://other:1' },
      ],
    },
    'routes[2] (/v1/a)',
    'the same prefix twice',
    undefined,
    /routes\[0\]/,
  )
  refuses(
    t,
    {
      routes: [
        { prefix: '/v1/a', upstream: UP },
        { prefix: '/', upstream: UP },
      ],
    },
    'routes[1]',
    '/ in the table plus UPSTREAM_URL',
    'http://catch-all:1',
    /UPSTREAM_URL/,
  )
  refuses(
    t,
    {
      routes: [
        { prefix: '/', upstream: UP },
        { prefix: '/', upstream: UP },
      ],
    },
    'routes[1] (/)',
    '/ twice',
    undefined,
    /routes\[0\]/,
  )
  // Distinct prefixes that share a beginning are fine: whole segments are compared.
  t.equal(
    loadRouteTable(
      {
        routes: [
          { prefix: '/v1/a', upstream: UP },
          { prefix: '/v1/ab', upstream: UP },
          { prefix: '/v1/a/b', upstream: UP },
        ],
      },
      undefined,
    ).length,
    3,
  )
})

t.test('reserved prefixes', async (t) => {
  for (const prefix of [
    '/v1/sub-accounts',
    '/v1/sub-accounts/x',
    '/v1/sub-accounts/usage',
    '/healthz',
    '/healthz/deep',
    '/readyz',
    '/openapi.json',
    '/docs',
    '/docs/static',
    // Spellings that the gateway refuses to proxy (docs/api.md), so no route could serve them.
    '/V1/Sub-Accounts',
    '/healthz.',
    '/docs./x',
  ]) {
    refuses(
      t,
      {
        routes: [
          { prefix: '/v1/ok', upstream: UP },
          { prefix, upstream: UP },
        ],
      },
      `routes[1] (${prefix})`,
      `reserved ${prefix}`,
      undefined,
      /gateway itself/,
    )
  }
  // Whole segments: a neighbour of a reserved path is an ordinary prefix.
  const neighbours = ['/v1/sub-accounts-archive', '/v1/sub', '/v1', '/healthzz', '/docs2', '/openapi.jsonx']
  const routes = loadRouteTable({ routes: neighbours.map((prefix) => ({ prefix, upstream: UP })) }, undefined)
  t.same(
    routes.map((route) => route.prefix),
    neighbours,
  )
})

t.test('scopes, public and numbers', async (t) => {
  refuses(
    t,
    second({ public: true, scopes: { read: ['tracking:read'] } }),
    WHERE,
    'a public route with read scopes',
    undefined,
    /public/,
  )
  refuses(
    t,
    second({ public: true, scopes: { write: ['tracking:write'] } }),
    WHERE,
    'a public route with write scopes',
    undefined,
    /public/,
  )
  t.equal(
    loadRouteTable(second({ public: true, scopes: { read: [], write: [] } }), undefined)[1]!.public,
    true,
    'empty scope lists are no scopes',
  )

  for (const scopes of [
    ['Tracking:read'],
    ['tracking read'],
    ['1tracking'],
    [''],
    [7],
    'tracking:read',
    ['tracking:'],
    ['tracking::read'],
  ]) {
    refuses(
      t,
      second({ scopes: { read: scopes } }),
      WHERE,
      `read scopes ${JSON.stringify(scopes)}`,
      undefined,
      /scopes\.read/,
    )
    refuses(
      t,
      second({ scopes: { write: scopes } }),
      WHERE,
      `write scopes ${JSON.stringify(scopes)}`,
      undefined,
      /scopes\.write/,
    )
  }
  refuses(t, second({ scopes: ['tracking:read'] }), WHERE, 'scopes as a list', undefined, /scopes/)
  refuses(t, second({ scopes: 'tracking:read' }), WHERE, 'scopes as a string', undefined, /scopes/)

  for (const value of ['x-real-ip', [1], ['a b'], [''], ['x:y'], null]) {
    refuses(
      t,
      second({ pass_headers: value }),
      WHERE,
      `pass_headers ${JSON.stringify(value)}`,
      undefined,
      /pass_headers/,
    )
  }
  for (const name of ['X-Service-Key-Id', 'x_service_scopes', 'x.service.resolved.tenant']) {
    refuses(t, second({ pass_headers: [name] }), WHERE, `pass_headers ${name}`, undefined, /X-Service-/)
  }

  for (const value of ['true', 1, 0, null, 'yes']) {
    refuses(t, second({ public: value }), WHERE, `public ${JSON.stringify(value)}`, undefined, /public/)
    refuses(
      t,
      second({ forward_authorization: value }),
      WHERE,
      `forward_authorization ${JSON.stringify(value)}`,
      undefined,
      /forward_authorization/,
    )
  }

  for (const value of [0, -1, 1.5, '1000', null, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
    refuses(t, second({ timeout_ms: value }), WHERE, `timeout_ms ${String(value)}`, undefined, /timeout_ms/)
    refuses(t, second({ max_body_bytes: value }), WHERE, `max_body_bytes ${String(value)}`, undefined, /max_body_bytes/)
    refuses(
      t,
      { timeout_ms: value, routes: [] },
      'top level',
      `top-level timeout_ms ${String(value)}`,
      undefined,
      /timeout_ms/,
    )
  }
  t.equal(loadRouteTable(second({ timeout_ms: 1 }), undefined)[1]!.timeoutMs, 1, 'timeout_ms 1 is fine')
})

t.test('connection limits and idle timeouts', async (t) => {
  const table = loadRouteTable(
    {
      max_connections: 40,
      body_idle_timeout_ms: 500,
      response_idle_timeout_ms: 700,
      routes: [
        { prefix: '/inherits', upstream: UP },
        { prefix: '/own', upstream: UP, max_connections: 3, body_idle_timeout_ms: 1, response_idle_timeout_ms: 2 },
        { prefix: '/shared', upstream: UP, max_connections: 8, max_connections_per_tenant: 8 },
        {
          prefix: '/accounts',
          upstream: UP,
          max_connections: 8,
          max_connections_per_tenant: 2,
          max_connections_per_account: 3,
        },
      ],
    },
    'http://catch-all:1',
  )
  t.same(
    table.map((r) => [
      r.prefix,
      r.maxConnections,
      r.maxConnectionsPerTenant,
      r.maxConnectionsPerAccount,
      r.bodyIdleTimeoutMs,
      r.responseIdleTimeoutMs,
    ]),
    [
      ['/inherits', 40, 10, 20, 500, 700],
      ['/own', 3, 1, 1, 1, 2],
      ['/shared', 8, 8, 4, 500, 700],
      ['/accounts', 8, 2, 3, 500, 700],
      ['/', 40, 10, 20, 500, 700],
    ],
    'a quarter of max_connections per tenant and half per account (at least one); top-level values are every route default',
  )
  for (const key of [
    'max_connections',
    'max_connections_per_tenant',
    'max_connections_per_account',
    'body_idle_timeout_ms',
    'response_idle_timeout_ms',
  ]) {
    for (const value of [0, -1, 1.5, '10', null]) {
      refuses(t, second({ [key]: value }), WHERE, `${key} ${String(value)}`, undefined, new RegExp(key))
    }
  }
  refuses(
    t,
    second({ max_connections: 4, max_connections_per_tenant: 5 }),
    WHERE,
    'a tenant share above the route',
    undefined,
    /max_connections_per_tenant may not exceed max_connections/,
  )
  refuses(
    t,
    second({ max_connections: 8, max_connections_per_account: 9 }),
    WHERE,
    'an account share above the route',
    undefined,
    /max_connections_per_account may not exceed max_connections/,
  )
  refuses(
    t,
    second({ max_connections: 8, max_connections_per_tenant: 4, max_connections_per_account: 3 }),
    WHERE,
    'a tenant share above its account share',
    undefined,
    /max_connections_per_tenant may not exceed max_connections_per_account/,
  )
  refuses(
    t,
    { max_connections_per_tenant: 2, routes: [] },
    'top level',
    'per tenant is a route option',
    undefined,
    /"max_connections_per_tenant"/,
  )
})

t.test('identity: signed identity for the upstream (docs/configuration.md)', async (t) => {
  const identityOf = (identity: unknown) => loadRouteTable(second({ identity }), 'http://fallback:80')
  t.same(
    identityOf({ audience: 'https://shipments.internal' })[1]!.identity,
    { audience: 'https://shipments.internal', ttlSeconds: 60 },
    'ttl_seconds defaults to 60',
  )
  t.same(identityOf({ audience: 'shipments', ttl_seconds: 10 })[1]!.identity, { audience: 'shipments', ttlSeconds: 10 })
  t.same(identityOf({ audience: 'shipments', ttl_seconds: 300 })[1]!.identity, {
    audience: 'shipments',
    ttlSeconds: 300,
  })
  const table = identityOf({ audience: 'a' })
  t.equal(table[0]!.identity, null, 'a route without the option signs nothing')
  t.equal(table[2]!.identity, null, 'nor does the catch-all of UPSTREAM_URL')
  t.ok(Object.isFrozen(table[1]!.identity), 'frozen with its route')

  const audience = /identity\.audience must be a non-empty string/
  refuses(t, second({ identity: {} }), WHERE, 'audience missing', undefined, audience)
  refuses(t, second({ identity: { audience: '' } }), WHERE, 'audience empty', undefined, audience)
  refuses(t, second({ identity: { audience: '   ' } }), WHERE, 'audience blank', undefined, audience)
  refuses(t, second({ identity: { audience: 42 } }), WHERE, 'audience a number', undefined, audience)
  refuses(t, second({ identity: { audience: ['a'] } }), WHERE, 'audience a list', undefined, audience)
  refuses(t, second({ identity: { audience: null } }), WHERE, 'audience null', undefined, audience)
  const ttl = /identity\.ttl_seconds must be a whole number from 10 to 300/
  for (const [value, what] of [
    [9, 'ttl 9'],
    [301, 'ttl 301'],
    [60.5, 'ttl not a whole number'],
    [0, 'ttl 0'],
    [-60, 'ttl negative'],
    ['60', 'ttl a string'],
    [null, 'ttl null'],
  ] as const) {
    refuses(t, second({ identity: { audience: 'a', ttl_seconds: value } }), WHERE, what, undefined, ttl)
  }
  const shape = /identity must be a mapping/
  refuses(t, second({ identity: 'shipments' }), WHERE, 'identity a string', undefined, shape)
  refuses(t, second({ identity: ['shipments'] }), WHERE, 'identity a list', undefined, shape)
  refuses(t, second({ identity: null }), WHERE, 'identity null', undefined, shape)
  refuses(
    t,
    second({ identity: { audience: 'a', ttl: 60 } }),
    WHERE,
    'an unknown key in identity',
    undefined,
    /identity: unknown key "ttl" \(allowed: audience, ttl_seconds\)/,
  )
  refuses(
    t,
    second({ public: true, identity: { audience: 'a' } }),
    WHERE,
    'identity on a public route',
    undefined,
    /public route cannot send a signed identity/,
  )
})

t.test('scopesFor by method', async (t) => {
  const [route] = loadRouteTable(
    { routes: [{ prefix: '/v1/s', upstream: UP, scopes: { read: ['s:read'], write: ['s:write', 's:audit'] } }] },
    undefined,
  ) as [ProxyRoute]
  for (const method of ['GET', 'HEAD', 'OPTIONS']) t.same(scopesFor(route, method), ['s:read'], `${method} reads`)
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE', 'PROPFIND'])
    t.same(scopesFor(route, method), ['s:write', 's:audit'], `${method} writes`)
  const [open] = loadRouteTable(
    { routes: [{ prefix: '/v1/o', upstream: UP, scopes: { write: ['o:write'] } }] },
    undefined,
  ) as [ProxyRoute]
  t.same(scopesFor(open, 'GET'), [], 'no read scopes: any key may read')
  t.same(scopesFor(open, 'DELETE'), ['o:write'])
})

t.test('websocket: true and its bounds, with their defaults; the bounds only with it', async (t) => {
  const [plain, live, tuned] = loadRouteTable(
    {
      routes: [
        { prefix: '/a', upstream: UP },
        { prefix: '/live', upstream: UP, websocket: true },
        {
          prefix: '/tuned',
          upstream: UP,
          websocket: true,
          max_websockets_per_tenant: 5,
          max_websockets_per_account: 12,
          websocket_idle_timeout_ms: 1000,
          websocket_max_message_bytes: 2048,
        },
      ],
    },
    undefined,
  )
  t.equal(plain!.websocket, null, 'off by default')
  t.same(
    live!.websocket,
    { maxPerTenant: 100, maxPerAccount: null, idleTimeoutMs: 300_000, maxMessageBytes: 1024 * 1024 },
    'the defaults (per account: half of MAX_CONNECTIONS, which the runtime knows)',
  )
  t.same(tuned!.websocket, { maxPerTenant: 5, maxPerAccount: 12, idleTimeoutMs: 1000, maxMessageBytes: 2048 }, 'as set')
  t.equal(loadRouteTable({ routes: [{ prefix: '/b', upstream: UP, websocket: false }] }, undefined)[0]!.websocket, null)
  const one = (entry: Record<string, unknown>) => ({ routes: [{ prefix: '/w', upstream: UP, ...entry }] })
  refuses(
    t,
    one({ websocket: 'yes' }),
    'routes[0] (/w)',
    'websocket not a boolean',
    undefined,
    /websocket must be true or false/,
  )
  refuses(
    t,
    one({ max_websockets_per_tenant: 5 }),
    'routes[0] (/w)',
    'a bound without websocket',
    undefined,
    /max_websockets_per_tenant needs websocket: true/,
  )
  refuses(
    t,
    one({ websocket: true, websocket_idle_timeout_ms: 0 }),
    'routes[0] (/w)',
    'a zero timeout',
    undefined,
    /websocket_idle_timeout_ms must be a positive whole number/,
  )
  refuses(
    t,
    one({ websocket: true, websocket_max_message_bytes: 1.5 }),
    'routes[0] (/w)',
    'a fraction',
    undefined,
    /websocket_max_message_bytes must be a positive whole number/,
  )
  for (const bad of [0, -3, 2.5, '10']) {
    refuses(
      t,
      one({ websocket: true, max_websockets_per_account: bad }),
      'routes[0] (/w)',
      `max_websockets_per_account ${JSON.stringify(bad)}`,
      undefined,
      /max_websockets_per_account must be a positive whole number/,
    )
  }
  refuses(
    t,
    one({ max_websockets_per_account: 5 }),
    'routes[0] (/w)',
    'the account bound without websocket',
    undefined,
    /max_websockets_per_account needs websocket: true/,
  )
})

t.test("same_origin_documents: a public route's opt-out of the sandbox, and nothing else's", async (t) => {
  const table = (route: Record<string, unknown>) => loadRouteTable(second(route), undefined)[1]!
  t.equal(table({ public: true }).sameOriginDocuments, false, 'a public route is sandboxed by default')
  t.equal(table({ public: true, same_origin_documents: true }).sameOriginDocuments, true, 'unless it opts out')
  t.equal(table({ public: true, same_origin_documents: false }).sameOriginDocuments, false)
  t.equal(table({}).sameOriginDocuments, false, 'a keyed route')
  t.equal(loadRouteTable({ routes: [] }, UP)[0]!.sameOriginDocuments, false, "UPSTREAM_URL's catch-all")
  refuses(t, second({ same_origin_documents: true }), WHERE, 'on a keyed route', undefined, /public route's option/)
  for (const value of ['true', 1, null])
    refuses(
      t,
      second({ public: true, same_origin_documents: value }),
      WHERE,
      `same_origin_documents ${JSON.stringify(value)}`,
      undefined,
      /same_origin_documents must be true or false/,
    )
})

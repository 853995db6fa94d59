import { join } from 'node:path'
import t from 'tap'
import { ConfigError, loadConfig } from '../../src/config.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'

const ROOT = new URL('../../', import.meta.url).pathname

t.test('defaults of docs/configuration.md', async (t) => {
  const config = loadConfig({}, ROOT)
  t.equal(config.port, 8080)
  t.equal(config.host, '0.0.0.0')
  t.equal(config.databaseUrl, undefined)
  t.equal(config.redis, undefined)
  t.equal(config.upstreamUrl, undefined, 'no catch-all, embedded or not')
  t.equal(config.logLevel, 'info')
  t.equal(config.metricsPort, 9091)
  t.equal(config.authzPort, null, 'no forward authorization')
  t.match(config.dataDir, /\.data$/)
  t.match(config.gatewayConfigPath, /config\/gateway\.yaml$/)
  t.equal(config.maxConnections, 10_000)
  t.same(config.managementRate, { requests: 50, perSeconds: 1 })
  t.ok(Object.isFrozen(config))
})

t.test('values are read', async (t) => {
  const config = loadConfig(
    {
      PORT: '0',
      HOST: '127.0.0.1',
      DATABASE_URL: 'postgres://u:p@db/x',
      REDIS_URL: 'redis://r:6379',
      UPSTREAM_URL: 'https://up',
      LOG_LEVEL: 'debug',
      METRICS_PORT: '9999',
      AUTHZ_PORT: '9998',
      DATA_DIR: '/tmp/d',
      MAX_CONNECTIONS: ' 250 ',
    },
    ROOT,
  )
  t.equal(config.maxConnections, 250)
  t.equal(config.port, 0)
  t.equal(config.databaseUrl, 'postgres://u:p@db/x')
  t.same(config.redis, { topology: 'server', url: 'redis://r:6379' })
  t.equal(config.upstreamUrl, 'https://up')
  t.equal(config.logLevel, 'debug')
  t.equal(config.metricsPort, 9999)
  t.equal(config.authzPort, 9998)
  t.equal(config.dataDir, '/tmp/d')
})

t.test('UPSTREAM_URL unset: no catch-all, whatever the database and the route table', async (t) => {
  const dir = t.testdir({ 'empty.yaml': '', 'no-routes.yaml': 'routes: []\n' })
  const at = (file: string) => join(dir, file)
  for (const file of ['empty.yaml', 'no-routes.yaml']) {
    for (const env of [{}, { DATABASE_URL: 'postgres://u@db/x' }]) {
      const config = loadConfig({ ...env, GATEWAY_CONFIG: at(file) }, ROOT)
      const what = `${file}, ${'DATABASE_URL' in env ? 'Postgres' : 'embedded'}`
      t.equal(config.upstreamUrl, undefined, `${what}: no upstream`)
      t.same(loadRouteTable(config.gatewayConfig, config.upstreamUrl), [], `${what}: no route, so 404 route_not_found`)
    }
  }
  const named = loadConfig({ UPSTREAM_URL: 'http://127.0.0.1:3000', GATEWAY_CONFIG: at('empty.yaml') }, ROOT)
  t.equal(named.upstreamUrl, 'http://127.0.0.1:3000', 'UPSTREAM_URL set: that one')
})

t.test('a bad value is one line that names the variable', async (t) => {
  const dir = t.testdir({ 'list.yaml': '- a\n- b\n', 'broken.yaml': 'routes: [\n' })
  const listFile = join(dir, 'list.yaml')
  const brokenFile = join(dir, 'broken.yaml')
  const cases: [Record<string, string>, string][] = [
    [{ PORT: 'eighty' }, 'PORT'],
    [{ PORT: '70000' }, 'PORT'],
    [{ PORT: '-1' }, 'PORT'],
    [{ METRICS_PORT: '1.5' }, 'METRICS_PORT'],
    [{ AUTHZ_PORT: 'x' }, 'AUTHZ_PORT'],
    [{ AUTHZ_PORT: '8080' }, 'AUTHZ_PORT'],
    [{ PORT: '9000', AUTHZ_PORT: '9000' }, 'AUTHZ_PORT'],
    [{ AUTHZ_PORT: '9091' }, 'AUTHZ_PORT'],
    [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL'],
    [{ DATABASE_URL: 'not a url' }, 'DATABASE_URL'],
    [{ REDIS_URL: 'http://r' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://r:6379/abc' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://r:6379/1x' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://r:6379/1/2' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://r:6379/-1' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://r:6379/3?password=hunter2' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://r:6379?db=3' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://r:6379/3?' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://r:6379/3#x' }, 'REDIS_URL'],
    [{ REDIS_URL: 'rediss://:pw@r/?tls=false' }, 'REDIS_URL'],
    [{ UPSTREAM_URL: 'ftp://u' }, 'UPSTREAM_URL'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ MAX_CONNECTIONS: '0' }, 'MAX_CONNECTIONS'],
    [{ MAX_CONNECTIONS: '-5' }, 'MAX_CONNECTIONS'],
    [{ MAX_CONNECTIONS: '1.5' }, 'MAX_CONNECTIONS'],
    [{ MAX_CONNECTIONS: 'many' }, 'MAX_CONNECTIONS'],
    [{ MAX_CONNECTIONS: '1e4' }, 'MAX_CONNECTIONS'],
    [{ MAX_CONNECTIONS: '1000000000' }, 'MAX_CONNECTIONS'],
    [{ GATEWAY_CONFIG: '/nonexistent/gateway.yaml' }, 'GATEWAY_CONFIG'],
    [{ GATEWAY_CONFIG: listFile }, 'GATEWAY_CONFIG'],
    [{ GATEWAY_CONFIG: brokenFile }, 'GATEWAY_CONFIG'],
  ]
  for (const [env, variable] of cases) {
    try {
      loadConfig(env, ROOT)
      t.fail(`${JSON.stringify(env)} was accepted`)
    } catch (err) {
      t.type(err, ConfigError)
      t.equal((err as ConfigError).variable, variable)
      t.match((err as Error).message, new RegExp(`^invalid configuration: ${variable} `))
      t.notMatch((err as Error).message, /\n/)
    }
  }
})

t.test('a URL written as a host and port alone: the message says to write the scheme first', async (t) => {
  const cases: [Record<string, string>, RegExp][] = [
    [
      { UPSTREAM_URL: '127.0.0.1:9000' },
      /UPSTREAM_URL is not a valid URL: write the scheme first, as in http:\/\/host:port$/,
    ],
    [
      { UPSTREAM_URL: 'localhost:9000' },
      /UPSTREAM_URL must use one of http:\/\/, https:\/\/ \(a host and port alone needs one first\)$/,
    ],
    [
      { DATABASE_URL: '127.0.0.1:5432' },
      /DATABASE_URL is not a valid URL: write the scheme first, as in postgres:\/\/host:port$/,
    ],
    [
      { REDIS_URL: 'localhost:6379' },
      /REDIS_URL must use one of redis:\/\/, rediss:\/\/ \(a host and port alone needs one first\)$/,
    ],
  ]
  for (const [env, message] of cases) t.throws(() => loadConfig(env, ROOT), { message }, JSON.stringify(env))
})

t.test('HOST with a port: HOST first, the port belongs in PORT', async (t) => {
  for (const [host, message] of [
    [
      'localhost:8081',
      'invalid configuration: HOST is "localhost:8081": an address without a port; the port belongs in PORT (HOST=localhost PORT=8081)',
    ],
    [
      '127.0.0.1:80',
      'invalid configuration: HOST is "127.0.0.1:80": an address without a port; the port belongs in PORT (HOST=127.0.0.1 PORT=80)',
    ],
    [
      '[::1]:8081',
      'invalid configuration: HOST is "[::1]:8081": an address without a port; the port belongs in PORT (HOST=::1 PORT=8081)',
    ],
  ] as const)
    t.throws(() => loadConfig({ HOST: host }, ROOT), { name: 'ConfigError', variable: 'HOST', message }, host)
  for (const host of ['::1', '::', 'fe80::1', '127.0.0.1', 'localhost', 'gw.internal'])
    t.equal(loadConfig({ HOST: host }, ROOT).host, host, `${host} is an address`)
})

t.test('a route table that does not exist: said so, with where a relative path starts', async (t) => {
  const dir = t.testdir({})
  t.throws(() => loadConfig({ GATEWAY_CONFIG: 'conf/routes.yaml' }, dir), {
    variable: 'GATEWAY_CONFIG',
    message: `invalid configuration: GATEWAY_CONFIG (conf/routes.yaml) does not exist: ${join(dir, 'conf/routes.yaml')} (a relative path starts at the working directory, ${dir}); name a route table that exists, by an absolute path or one from there`,
  })
  t.throws(() => loadConfig({}, dir), {
    message: `invalid configuration: GATEWAY_CONFIG is not set, and its default config/gateway.yaml does not exist: ${join(dir, 'config/gateway.yaml')} (a relative path starts at the working directory, ${dir}); name a route table that exists, by an absolute path or one from there`,
  })
  t.throws(
    () => loadConfig({ GATEWAY_CONFIG: dir }, dir),
    { message: /^invalid configuration: GATEWAY_CONFIG cannot be read: EISDIR / },
    'another failure: its code',
  )
})

t.test('a password in a bad URL is not echoed', async (t) => {
  t.throws(() => loadConfig({ DATABASE_URL: 'mysql://user:hunter2@db/x' }, ROOT), { message: /^(?!.*hunter2)/ })
})

t.test('MANAGEMENT_RATE', async (t) => {
  t.same(loadConfig({ MANAGEMENT_RATE: '200/10s' }, ROOT).managementRate, { requests: 200, perSeconds: 10 })
  for (const bad of ['0/1s', '50', '50/0s', '50/3601s', 'fast', '-1/1s']) {
    t.throws(() => loadConfig({ MANAGEMENT_RATE: bad }, ROOT), { name: 'ConfigError', message: /MANAGEMENT_RATE/ }, bad)
  }
})

t.test('ISSUER_URL, ACCESS_TOKEN_TTL_SECONDS, SIGNING_KEY_ROTATION_DAYS', async (t) => {
  t.equal(loadConfig({ PORT: '9000' }, ROOT).issuerUrl, 'http://localhost:9000', 'by default, the local origin')
  t.equal(loadConfig({ ISSUER_URL: 'https://api.example.com/' }, ROOT).issuerUrl, 'https://api.example.com')
  t.equal(loadConfig({ ISSUER_URL: 'https://example.com/gw' }, ROOT).issuerUrl, 'https://example.com/gw', 'a path')
  for (const bad of ['ftp://x', 'https://x/?a=1', 'https://x/#f', 'https://x?', 'https://u:p@x', 'not a url']) {
    t.throws(() => loadConfig({ ISSUER_URL: bad }, ROOT), { name: 'ConfigError', message: /ISSUER_URL/ }, bad)
  }
  t.throws(() => loadConfig({ ISSUER_URL: 'https://u:hunter2@x' }, ROOT), { message: /^(?!.*hunter2)/ })
  t.equal(loadConfig({}, ROOT).accessTokenTtlSeconds, 900)
  t.equal(loadConfig({ ACCESS_TOKEN_TTL_SECONDS: '3600' }, ROOT).accessTokenTtlSeconds, 3600)
  for (const bad of ['0', '3601', '1.5', 'x'])
    t.throws(() => loadConfig({ ACCESS_TOKEN_TTL_SECONDS: bad }, ROOT), { message: /ACCESS_TOKEN_TTL_SECONDS/ }, bad)
  t.equal(loadConfig({}, ROOT).signingKeyRotationDays, 30)
  t.throws(() => loadConfig({ SIGNING_KEY_ROTATION_DAYS: '0' }, ROOT), { message: /SIGNING_KEY_ROTATION_DAYS/ })
})

t.test('WEBHOOKS_ALLOW_INSECURE: true or false, false by default', async (t) => {
  t.equal(loadConfig({}, ROOT).webhooksAllowInsecure, false)
  t.equal(loadConfig({ WEBHOOKS_ALLOW_INSECURE: 'true' }, ROOT).webhooksAllowInsecure, true)
  t.equal(loadConfig({ WEBHOOKS_ALLOW_INSECURE: 'false' }, ROOT).webhooksAllowInsecure, false)
  for (const bad of ['yes', '1', 'TRUE'])
    t.throws(() => loadConfig({ WEBHOOKS_ALLOW_INSECURE: bad }, ROOT), { message: /WEBHOOKS_ALLOW_INSECURE/ }, bad)
})

t.test('EVENTS_RETENTION_DAYS: 90 by default, 1 to 36500', async (t) => {
  t.equal(loadConfig({}, ROOT).eventsRetentionDays, 90)
  t.equal(loadConfig({ EVENTS_RETENTION_DAYS: '7' }, ROOT).eventsRetentionDays, 7)
  for (const bad of ['0', '36501', '1.5', 'x'])
    t.throws(() => loadConfig({ EVENTS_RETENTION_DAYS: bad }, ROOT), { message: /EVENTS_RETENTION_DAYS/ }, bad)
})

t.test(
  'REQUEST_LOG_RETENTION_DAYS: 7 by default, 0 (off) to 90; REQUEST_LOG_DATABASE_URL a postgres URL',
  async (t) => {
    t.equal(loadConfig({}, ROOT).requestLogRetentionDays, 7)
    t.equal(loadConfig({ REQUEST_LOG_RETENTION_DAYS: '0' }, ROOT).requestLogRetentionDays, 0)
    t.equal(loadConfig({ REQUEST_LOG_RETENTION_DAYS: '90' }, ROOT).requestLogRetentionDays, 90)
    for (const bad of ['91', '-1', '1.5', 'x'])
      t.throws(
        () => loadConfig({ REQUEST_LOG_RETENTION_DAYS: bad }, ROOT),
        { message: /REQUEST_LOG_RETENTION_DAYS.*0 \(off\) to 90/ },
        bad,
      )
    t.equal(loadConfig({}, ROOT).requestLogDatabaseUrl, undefined)
    const url = 'postgres://log:secret@db.internal:5432/log'
    t.equal(loadConfig({ REQUEST_LOG_DATABASE_URL: url }, ROOT).requestLogDatabaseUrl, url)
    t.throws(() => loadConfig({ REQUEST_LOG_DATABASE_URL: 'mysql://log:secret@db/log' }, ROOT), {
      message:
        /REQUEST_LOG_DATABASE_URL must use one of postgres:\/\/, postgresql:\/\/ \(a host and port alone needs one first\)$/,
    })
  },
)

t.test('USAGE_PERIOD_SECONDS: 3600 by default, 60 to 86400, dividing a day', async (t) => {
  t.equal(loadConfig({}, ROOT).usagePeriodSeconds, 3600)
  for (const good of ['60', '300', '900', '86400'])
    t.equal(loadConfig({ USAGE_PERIOD_SECONDS: good }, ROOT).usagePeriodSeconds, Number(good))
  for (const bad of ['59', '7', '3601', '7000', '86401', '0', '1.5', 'x'])
    t.throws(() => loadConfig({ USAGE_PERIOD_SECONDS: bad }, ROOT), { message: /USAGE_PERIOD_SECONDS/ }, bad)
  t.throws(() => loadConfig({ USAGE_PERIOD_SECONDS: '7000' }, ROOT), { message: /divide a day/ })
})

t.test('USAGE_CLOSE_GRACE_SECONDS: 120 by default, 1 to 3600', async (t) => {
  t.equal(loadConfig({}, ROOT).usageCloseGraceSeconds, 120)
  t.equal(loadConfig({ USAGE_CLOSE_GRACE_SECONDS: '1' }, ROOT).usageCloseGraceSeconds, 1)
  t.equal(loadConfig({ USAGE_CLOSE_GRACE_SECONDS: '3600' }, ROOT).usageCloseGraceSeconds, 3600)
  for (const bad of ['0', '3601', '1.5', 'x', '-1'])
    t.throws(() => loadConfig({ USAGE_CLOSE_GRACE_SECONDS: bad }, ROOT), { message: /USAGE_CLOSE_GRACE_SECONDS/ }, bad)
})

t.test('USAGE_EXPORT_URL and USAGE_EXPORT_SECRET: both or neither; https, or http to loopback', async (t) => {
  const secret = `whsec_${Buffer.alloc(32, 1).toString('base64')}`
  t.equal(loadConfig({}, ROOT).usageExport, null)
  t.same(
    loadConfig({ USAGE_EXPORT_URL: 'https://meter.example/ingest?x=1', USAGE_EXPORT_SECRET: secret }, ROOT).usageExport,
    {
      url: 'https://meter.example/ingest?x=1',
      secret,
    },
  )
  for (const url of ['http://127.0.0.1:9/x', 'http://[::1]:9/x', 'http://localhost:9/x'])
    t.equal(loadConfig({ USAGE_EXPORT_URL: url, USAGE_EXPORT_SECRET: secret }, ROOT).usageExport?.url, url)
  const refused: [Record<string, string>, RegExp][] = [
    [{ USAGE_EXPORT_URL: 'https://m.example' }, /USAGE_EXPORT_SECRET is required with USAGE_EXPORT_URL/],
    [{ USAGE_EXPORT_SECRET: secret }, /USAGE_EXPORT_URL is required with USAGE_EXPORT_SECRET/],
    [{ USAGE_EXPORT_URL: 'http://m.example/x', USAGE_EXPORT_SECRET: secret }, /USAGE_EXPORT_URL must use https/],
    [{ USAGE_EXPORT_URL: 'http://10.0.0.1/x', USAGE_EXPORT_SECRET: secret }, /USAGE_EXPORT_URL must use https/],
    [{ USAGE_EXPORT_URL: 'ftp://m.example/x', USAGE_EXPORT_SECRET: secret }, /USAGE_EXPORT_URL must use https/],
    [{ USAGE_EXPORT_URL: 'not a url', USAGE_EXPORT_SECRET: secret }, /USAGE_EXPORT_URL is not a valid URL/],
    [{ USAGE_EXPORT_URL: 'https://u:p@m.example/x', USAGE_EXPORT_SECRET: secret }, /must not carry a user or password/],
    [{ USAGE_EXPORT_URL: 'https://m.example', USAGE_EXPORT_SECRET: 'secret' }, /USAGE_EXPORT_SECRET must be whsec_/],
    [
      { USAGE_EXPORT_URL: 'https://m.example', USAGE_EXPORT_SECRET: `whsec_${Buffer.alloc(16).toString('base64')}` },
      /24 to 64 random bytes/,
    ],
    [
      { USAGE_EXPORT_URL: 'https://m.example', USAGE_EXPORT_SECRET: `whsec_${Buffer.alloc(65).toString('base64')}` },
      /24 to 64 random bytes/,
    ],
  ]
  for (const [env, message] of refused) t.throws(() => loadConfig(env, ROOT), { message }, JSON.stringify(env))
  t.throws(() => loadConfig({ USAGE_EXPORT_URL: 'https://u:hunter2@m.example', USAGE_EXPORT_SECRET: secret }, ROOT), {
    message: /^(?!.*hunter2)/,
  })
})

t.test('WEBHOOK_ENDPOINTS_MAX: 20 by default, 1 to 1000', async (t) => {
  t.equal(loadConfig({}, ROOT).webhookEndpointsMax, 20)
  t.equal(loadConfig({ WEBHOOK_ENDPOINTS_MAX: '5' }, ROOT).webhookEndpointsMax, 5)
  for (const bad of ['0', '1001', '1.5', 'x'])
    t.throws(() => loadConfig({ WEBHOOK_ENDPOINTS_MAX: bad }, ROOT), { message: /WEBHOOK_ENDPOINTS_MAX/ }, bad)
})

t.test('WEBHOOKS_RETRY_SCHEDULE: 5s to 10h by default; a list of delays', async (t) => {
  const h = 3_600_000
  t.same(loadConfig({}, ROOT).webhooksRetrySchedule, [5_000, 300_000, 1_800_000, 2 * h, 5 * h, 10 * h, 10 * h])
  t.same(loadConfig({ WEBHOOKS_RETRY_SCHEDULE: '50ms, 1s,2m' }, ROOT).webhooksRetrySchedule, [50, 1_000, 120_000])
  t.same(loadConfig({ WEBHOOKS_RETRY_SCHEDULE: '0ms' }, ROOT).webhooksRetrySchedule, [0])
  const tooMany = Array.from({ length: 21 }, () => '1s').join(',')
  for (const bad of ['5', '5d', '1s,,2s', '-1s', '1.5s', '169h', tooMany])
    t.throws(() => loadConfig({ WEBHOOKS_RETRY_SCHEDULE: bad }, ROOT), { message: /WEBHOOKS_RETRY_SCHEDULE/ }, bad)
})

t.test('REDIS_SENTINELS and REDIS_SENTINEL_NAME: a master followed through Sentinel', async (t) => {
  const config = loadConfig(
    { REDIS_SENTINELS: 'tgw-redis:26379, 10.0.0.2:26380,[::1]:26381', REDIS_SENTINEL_NAME: 'mymaster' },
    ROOT,
  )
  t.same(config.redis, {
    topology: 'sentinel',
    sentinels: [
      { host: 'tgw-redis', port: 26379 },
      { host: '10.0.0.2', port: 26380 },
      { host: '::1', port: 26381 },
    ],
    name: 'mymaster',
    credentials: {},
  })
  const withCredentials = loadConfig(
    { REDIS_SENTINELS: 'tgw-redis:26379', REDIS_SENTINEL_NAME: 'mymaster', REDIS_URL: 'redis://:s%40cret@/2' },
    ROOT,
  )
  t.same(withCredentials.redis, {
    topology: 'sentinel',
    sentinels: [{ host: 'tgw-redis', port: 26379 }],
    name: 'mymaster',
    credentials: { password: 's@cret', db: 2 },
  })
})

t.test('REDIS_CLUSTER_NODES: the seed nodes of a cluster, REDIS_URL giving credentials only', async (t) => {
  const config = loadConfig({ REDIS_CLUSTER_NODES: 'a:7000,b:7001', REDIS_URL: 'rediss://gw:pw@' }, ROOT)
  t.same(config.redis, {
    topology: 'cluster',
    nodes: [
      { host: 'a', port: 7000 },
      { host: 'b', port: 7001 },
    ],
    credentials: { username: 'gw', password: 'pw', tls: true },
  })
})

t.test('Redis topologies: each mistake names its variable and says what to do', async (t) => {
  const cases: [Record<string, string>, string, RegExp][] = [
    [
      { REDIS_SENTINELS: 's:26379', REDIS_CLUSTER_NODES: 'c:7000', REDIS_SENTINEL_NAME: 'm' },
      'REDIS_CLUSTER_NODES',
      /together with REDIS_SENTINELS.*unset one/,
    ],
    [{ REDIS_SENTINELS: 's:26379' }, 'REDIS_SENTINEL_NAME', /must be set with REDIS_SENTINELS.*mymaster/],
    [{ REDIS_SENTINEL_NAME: 'mymaster' }, 'REDIS_SENTINEL_NAME', /REDIS_SENTINELS is not/],
    [{ REDIS_SENTINELS: 's:26379', REDIS_SENTINEL_NAME: 'my master' }, 'REDIS_SENTINEL_NAME', /A-Z a-z 0-9/],
    [{ REDIS_SENTINELS: 's', REDIS_SENTINEL_NAME: 'm' }, 'REDIS_SENTINELS', /host:port separated by commas.*got "s"/],
    [{ REDIS_SENTINELS: 's:26379,,t:1', REDIS_SENTINEL_NAME: 'm' }, 'REDIS_SENTINELS', /got ""/],
    [{ REDIS_CLUSTER_NODES: 'c:0' }, 'REDIS_CLUSTER_NODES', /host:port.*got "c:0"/],
    [{ REDIS_CLUSTER_NODES: 'c:99999' }, 'REDIS_CLUSTER_NODES', /host:port/],
    [{ REDIS_CLUSTER_NODES: 'http://c:7000' }, 'REDIS_CLUSTER_NODES', /host:port/],
    [
      { REDIS_SENTINELS: 's:1', REDIS_SENTINEL_NAME: 'm', REDIS_URL: 'redis://:pw@redis:6379/0' },
      'REDIS_URL',
      /only credentials and a database when REDIS_SENTINELS is set.*not a host/,
    ],
    [
      { REDIS_CLUSTER_NODES: 'c:7000', REDIS_URL: 'redis://:pw@/3' },
      'REDIS_URL',
      /must not name a database.*database 0 only/,
    ],
    [
      { REDIS_CLUSTER_NODES: 'c:7000', REDIS_URL: 'redis://:pw@c:7000' },
      'REDIS_URL',
      /only credentials when REDIS_CLUSTER_NODES is set/,
    ],
    [{ REDIS_URL: 'redis://r:6379/3?password=pw' }, 'REDIS_URL', /must not have a query string or a fragment/],
    [
      { REDIS_SENTINELS: 's:1', REDIS_SENTINEL_NAME: 'm', REDIS_URL: 'redis://:pw@/3?password=pw' },
      'REDIS_URL',
      /must not have a query string or a fragment/,
    ],
    [
      { REDIS_CLUSTER_NODES: 'c:7000', REDIS_URL: 'redis://:pw@#x' },
      'REDIS_URL',
      /must not have a query string or a fragment/,
    ],
  ]
  for (const [env, variable, message] of cases) {
    t.throws(
      () => loadConfig(env, ROOT),
      { name: 'ConfigError', variable, message },
      `${JSON.stringify(env)}: ${variable}`,
    )
  }
  t.throws(
    () =>
      loadConfig({ REDIS_SENTINELS: 's:1', REDIS_SENTINEL_NAME: 'm', REDIS_URL: 'redis://:hunter2@redis:6379' }, ROOT),
    { message: /^(?!.*hunter2)/ },
    'the password is never echoed',
  )
  t.throws(
    () => loadConfig({ REDIS_URL: 'redis://r:6379/3?password=hunter2' }, ROOT),
    { message: /^(?!.*hunter2)/ },
    'nor the query that holds one',
  )
})

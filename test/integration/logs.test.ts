// Logs (docs/operations.md): no secret is ever written, and every request leaves exactly one
// "request" line that can be joined to its response by the request id. The gateway runs in-process
// over real sockets, Postgres, Redis and an upstream, with the logger options main.ts uses
// (loggerOptions) at level trace, writing into an array, so that every line any part of the gateway
// writes is searched.
import t from 'tap'
import pino from 'pino'
import { LOG_CENSOR, loggerOptions } from '../../src/ops/logging.js'
import { generateApiKey } from '../../src/auth/key-format.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { REFUSED_URL, startUpstream } from '../helpers/upstream.js'

interface LogLine {
  level: number
  msg?: string
  [field: string]: unknown
}

const CENSOR = LOG_CENSOR
/** Field names whose value docs/operations.md says is redacted wherever it appears in a logged object. */
const SECRET_FIELDS = new Set(['authorization', 'api_key', 'client_secret', 'x-api-key'])

const written: string[] = []
// What main.ts builds, as an instance so that the lines can be captured.
const logger = pino(loggerOptions('trace'), { write: (line: string) => written.push(line) })

t.test('logs: no secret in any line, one request line per request', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await startGateway(t, {
    upstreamUrl: upstream.url,
    logger,
    // A route whose upstream is down: a 502 is logged at error level with its error.
    gatewayConfig: { routes: [{ prefix: '/dead', upstream: REFUSED_URL }] },
  })
  const P = await gw.createParent()

  /** Every secret value seen: keys and client secrets returned, Authorization values sent. */
  const secrets = new Set<string>()
  function noteKey(apiKey: string): void {
    secrets.add(apiKey)
    secrets.add(`Bearer ${apiKey}`)
  }
  noteKey(P.apiKey)

  interface Sent {
    what: string
    res: RawResponse
  }
  const sent: Sent[] = []

  /** One request over a real socket, remembered with what it was for. */
  async function send(
    what: string,
    apiKey: string | null,
    options: Parameters<typeof callAs>[2],
    expectedStatus: number,
  ): Promise<RawResponse> {
    if (apiKey !== null) noteKey(apiKey)
    const res = await callAs(gw.url, apiKey, options)
    sent.push({ what, res })
    t.equal(res.status, expectedStatus, `${what}: ${expectedStatus} (${res.body.slice(0, 300)})`)
    return res
  }

  // Management (docs/api.md), every route, as the parent.
  const created = await send(
    'create',
    P.apiKey,
    {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      json: { name: 'logged', external_id: 'logged-1', metadata: { plan: 'gold' } },
    },
    201,
  )
  const sub = created.json() as { id: string }
  await send('list', P.apiKey, { path: '/v1/sub-accounts?limit=5' }, 200)
  await send('get', P.apiKey, { path: `/v1/sub-accounts/${sub.id}` }, 200)
  await send(
    'patch',
    P.apiKey,
    { method: 'PATCH', path: `/v1/sub-accounts/${sub.id}`, acting: 'self', json: { name: 'renamed' } },
    200,
  )
  const minted = await send(
    'mint key',
    P.apiKey,
    {
      method: 'POST',
      path: `/v1/sub-accounts/${sub.id}/api-keys`,
      acting: 'self',
      json: { name: 'sub key', scopes: ['tracking:read', 'tracking:write'] },
    },
    201,
  )
  const subKey = minted.json() as { id: string; api_key: string; client_secret: string }
  t.match(subKey.api_key, /^tgw_/)
  t.match(subKey.client_secret, /^tgws_/)
  noteKey(subKey.api_key)
  secrets.add(subKey.client_secret)
  await send('list keys', P.apiKey, { path: `/v1/sub-accounts/${sub.id}/api-keys` }, 200)
  await send('get key', P.apiKey, { path: `/v1/sub-accounts/${sub.id}/api-keys/${subKey.id}` }, 200)
  await send(
    'deactivate',
    P.apiKey,
    { method: 'POST', path: `/v1/sub-accounts/${sub.id}/deactivate`, acting: 'self' },
    200,
  )
  await send(
    'reactivate',
    P.apiKey,
    { method: 'POST', path: `/v1/sub-accounts/${sub.id}/reactivate`, acting: 'self' },
    200,
  )

  // Proxied: the parent acting as the sub-account (with a key in the query string, which is never
  // logged), the sub-account's own key, and a body that carries secrets (streamed, never logged).
  const asSub = await send(
    'proxied as the sub-account',
    P.apiKey,
    {
      path: `/v1/things/1?api_key=${subKey.api_key}&client_secret=${subKey.client_secret}`,
      acting: sub.id,
    },
    200,
  )
  // An absolute-form target with a user and password: refused, and logged without its authority.
  const password = `pw${'z'.repeat(12)}`
  secrets.add(password)
  await send('absolute-form target', null, { path: `http://user:${password}@127.0.0.1/v1/things/1?q=1` }, 400)
  const own = await send(
    'proxied with the sub-account key',
    subKey.api_key,
    { path: '/v1/own', headers: [['X-Request-Id', 'logs-test-own']] },
    200,
  )
  await send(
    'proxied body with secrets',
    subKey.api_key,
    {
      method: 'POST',
      path: '/v1/orders',
      json: { api_key: subKey.api_key, client_secret: subKey.client_secret, authorization: `Bearer ${P.apiKey}` },
    },
    200,
  )
  await send('sub-account key on management', subKey.api_key, { path: '/v1/sub-accounts' }, 403)
  await send('proxied to a dead upstream', P.apiKey, { path: '/dead/x', acting: `ext:logged-1` }, 502)
  await send('usage', P.apiKey, { path: '/v1/sub-accounts/usage' }, 200)
  const rolled = await send(
    'roll key',
    P.apiKey,
    {
      method: 'POST',
      path: `/v1/sub-accounts/${sub.id}/api-keys/${subKey.id}/roll`,
      acting: 'self',
      json: { expires_in_seconds: 60 },
    },
    201,
  )
  const successor = rolled.json() as { api_key: string; client_secret: string }
  noteKey(successor.api_key)
  secrets.add(successor.client_secret)
  await send('successor key', successor.api_key, { path: '/v1/things/4' }, 200)
  await send(
    'revoke key',
    P.apiKey,
    { method: 'POST', path: `/v1/sub-accounts/${sub.id}/api-keys/${subKey.id}/revoke`, acting: 'self' },
    200,
  )

  // Failures.
  const unknownKey = generateApiKey().apiKey
  await send('unknown key', unknownKey, { path: '/v1/things/2' }, 401)
  await send('malformed key', `tgw_${'x'.repeat(20)}`, { path: '/v1/sub-accounts' }, 401)
  await send('revoked key', subKey.api_key, { path: '/v1/things/3' }, 401)
  await send(
    'unknown field carrying a key',
    P.apiKey,
    {
      method: 'PATCH',
      path: `/v1/sub-accounts/${sub.id}`,
      acting: 'self',
      json: { name: 'x', api_key: subKey.api_key },
    },
    400,
  )
  await send(
    'unknown field carrying a client secret',
    P.apiKey,
    {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      json: { name: 'y', client_secret: subKey.client_secret },
    },
    400,
  )
  await send(
    'a key as a field value',
    P.apiKey,
    {
      method: 'POST',
      path: `/v1/sub-accounts/${sub.id}/api-keys`,
      acting: 'self',
      json: { name: unknownKey, scopes: [subKey.api_key] },
    },
    400,
  )
  await send(
    'invalid JSON carrying a key',
    P.apiKey,
    {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      headers: [['Content-Type', 'application/json']],
      body: `{"name": "z", "api_key": "${subKey.api_key}"`,
    },
    400,
  )
  await send('healthz', null, { path: '/healthz' }, 200)

  const expectedLines = sent.length
  // The line is written when the response is done, which the client may see first.
  await eventually(
    5_000,
    async () => written.filter((line) => line.includes('"msg":"request"')).length >= expectedLines,
  )

  const lines: LogLine[] = written.map((line) => JSON.parse(line) as LogLine)
  const requestLines = lines.filter((line) => line.msg === 'request')

  t.test('every line is JSON, and the capture saw the gateway write', async (t) => {
    t.equal(lines.length, written.length)
    t.ok(
      lines.some((line) => line.level === 10 || line.level === 20),
      'levels below info are captured too',
    )
    t.ok(
      lines.some((line) => line.level === 50),
      'the 502 was logged at error level',
    )
  })

  t.test('no secret value appears in any line', async (t) => {
    t.ok(secrets.size >= 9, `${secrets.size} secret values collected`)
    for (const secret of secrets) {
      const bare = secret.replace(/^Bearer /, '').replace(/^tgws?_/, '')
      const leaks = written.filter((line) => line.includes(secret) || line.includes(bare))
      t.same(leaks, [], `never logged: ${secret.slice(0, 12)}…`)
    }
  })

  t.test('fields named like secrets hold the censor only', async (t) => {
    const found: string[] = []
    const walk = (value: unknown, path: string): void => {
      if (value === null || typeof value !== 'object') return
      for (const [name, inner] of Object.entries(value)) {
        if (SECRET_FIELDS.has(name.toLowerCase()) && inner !== CENSOR)
          found.push(`${path}.${name}=${JSON.stringify(inner)}`)
        walk(inner, `${path}.${name}`)
      }
    }
    for (const [i, line] of lines.entries()) walk(line, `line ${i}`)
    t.same(found, [])
  })

  t.test('LOG_REDACT covers the shapes in which a secret could be logged', async (t) => {
    // Nothing above made the gateway log a header or a body; this is what would protect it if it
    // did (a logged request, headers, a minted key, an error carrying them).
    const apiKey = generateApiKey().apiKey
    const secret = `tgws_${'s'.repeat(40)}`
    const bearer = `Bearer ${apiKey}`
    const before = written.length
    const log = gw.app.log
    log.info(
      { req: { method: 'GET', url: '/x', headers: { authorization: bearer, 'x-api-key': apiKey } } },
      'probe request',
    )
    log.info({ headers: { authorization: bearer } }, 'probe headers')
    log.info({ authorization: bearer, api_key: apiKey, client_secret: secret }, 'probe top level')
    log.info({ key: { api_key: apiKey, client_secret: secret }, body: { api_key: apiKey } }, 'probe nested')
    log.child({ reqId: 'probe' }).warn({ err: { message: 'x', authorization: bearer } }, 'probe child')
    const probes = written.slice(before)
    t.equal(probes.length, 5)
    for (const value of [apiKey, secret, bearer, apiKey.slice(4), secret.slice(5)]) {
      t.same(
        probes.filter((line) => line.includes(value)),
        [],
        `redacted: ${value.slice(0, 10)}…`,
      )
    }
    // The first goes through fastify's req serializer, which keeps no headers at all.
    for (const line of probes.slice(1)) t.ok(line.includes(CENSOR), `the censor stands in: ${line}`)
  })

  t.test('exactly one request line per request, joined by the request id', async (t) => {
    t.equal(requestLines.length, expectedLines, 'one request line per request, no more')
    for (const { what, res } of sent) {
      const id = res.headers['x-request-id']
      t.type(id, 'string', `${what}: an x-request-id`)
      const mine = requestLines.filter((line) => line.reqId === id)
      t.equal(mine.length, 1, `${what}: exactly one request line`)
      const line = mine[0]
      if (line === undefined) continue
      t.equal(line.status, res.status, `${what}: status`)
      t.type(line.ms, 'number', `${what}: ms`)
      t.ok((line.ms as number) >= 0, `${what}: ms >= 0`)
      t.notOk(String(line.path).includes('?'), `${what}: no query string in the path`)
    }
    t.equal(own.headers['x-request-id'], 'logs-test-own', 'a sane client request id is kept')
  })

  t.test('the request line of a proxied request acting as the sub-account', async (t) => {
    const parentKeyId = (asSub.json() as { headers: Record<string, string> }).headers['x-service-key-id']
    t.match(parentKeyId, /^[0-9a-f-]{36}$/)
    const line = requestLines.find((l) => l.reqId === asSub.headers['x-request-id'])
    t.match(line, {
      level: 30,
      method: 'GET',
      path: '/v1/things/1',
      route: String,
      kind: 'proxy',
      status: 200,
      ms: Number,
      callerTenant: P.id,
      resolvedTenant: sub.id,
      keyId: parentKeyId,
    })
    t.not(line?.route, null, 'the route is named')

    const ownLine = requestLines.find((l) => l.reqId === 'logs-test-own')
    t.match(
      ownLine,
      { kind: 'proxy', status: 200, callerTenant: sub.id, resolvedTenant: sub.id, keyId: subKey.id },
      "the sub-account's own key",
    )

    const getLine = requestLines.find(
      (l) => l.reqId === sent.find((s) => s.what === 'get')!.res.headers['x-request-id'],
    )
    t.match(getLine, {
      level: 30,
      kind: 'management',
      route: '/v1/sub-accounts/:sub_id',
      path: `/v1/sub-accounts/${sub.id}`,
      callerTenant: P.id,
      resolvedTenant: P.id,
    })

    const unknownLine = requestLines.find(
      (l) => l.reqId === sent.find((s) => s.what === 'unknown key')!.res.headers['x-request-id'],
    )
    t.match(unknownLine, { level: 30, status: 401, callerTenant: null, resolvedTenant: null, keyId: null })

    const healthLine = requestLines.find(
      (l) => l.reqId === sent.find((s) => s.what === 'healthz')!.res.headers['x-request-id'],
    )
    t.match(healthLine, { level: 20, kind: 'ops', route: '/healthz', status: 200 }, 'probes at debug')
  })
})

// OpenAPI 3.1 at /openapi.json and the docs page at /docs (docs/operations.md): a valid document
// that describes every management route the app actually serves, and pages that need no key and
// never reach an upstream, even behind a catch-all route.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { Validator } from '@seriousme/openapi-schema-validator'
import { compiledSerializer, compiledValidator } from '../../src/http/schema-compilers.js'
import {
  CREDENTIAL_PATHS,
  MANAGEMENT_PREFIX,
  SECRET_SCANNING_GITHUB_PATH,
  VERIFY_PATH,
} from '../../src/shared/paths.js'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest } from '../helpers/http.js'
import type { JsonBody as Json } from '../helpers/json.js'
import { startUpstream } from '../helpers/upstream.js'

/** `/v1/sub-accounts/:sub_id/` → `/v1/sub-accounts/{sub_id}` */
function openApiPath(url: string): string {
  return url.replace(/(.)\/$/, '$1').replace(/:([A-Za-z0-9_]+)/g, '{$1}')
}

/** Follows a local `$ref` (`#/components/...`), or returns the object itself. */
function deref(doc: Json, value: Json): Json {
  if (typeof value?.$ref !== 'string') return value
  const ref: string = value.$ref
  if (!ref.startsWith('#/')) throw new Error(`not a local reference: ${ref}`)
  return ref
    .slice(2)
    .split('/')
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((node: Json, part) => (node === undefined ? undefined : node[part]), doc)
}

/** Every `$ref` in the document, with where it is. */
function refsOf(node: Json, at = '#'): { at: string; ref: string }[] {
  if (node === null || typeof node !== 'object') return []
  const here = typeof node.$ref === 'string' ? [{ at, ref: node.$ref as string }] : []
  return here.concat(Object.entries(node).flatMap(([key, child]) => refsOf(child, `${at}/${key}`)))
}

const assetsOf = (html: string) => [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((match) => match[1]!)

function isProblemJson(doc: Json, response: Json): boolean {
  const media = deref(doc, response)?.content?.['application/problem+json']
  return media !== undefined && deref(doc, media.schema) === doc.components.schemas.Problem
}

t.test('OpenAPI document and docs page', async (t) => {
  const upstream = await startUpstream(t)
  // A prefixed route and a catch-all: their wildcard routes must stay out of the document, and
  // neither may answer the document or the docs.
  const gw = await startGateway(t, {
    upstreamUrl: upstream.url,
    gatewayConfig: { routes: [{ prefix: '/v1/shipments', upstream: upstream.url }] },
    recordRoutes: true,
  })
  const routes = gw.routes
  const get = (path: string) => rawRequest(gw.url, { path })

  const res = await get('/openapi.json')
  t.equal(res.status, 200, `GET /openapi.json without a key (${res.body.slice(0, 200)})`)
  t.match(String(res.headers['content-type']), /^application\/json/, 'as JSON')
  const doc: Json = res.json()

  const management = routes.filter((route) => route.method !== 'HEAD' && route.url.startsWith(MANAGEMENT_PREFIX))
  const expected = new Set(management.map((route) => `${route.method.toLowerCase()} ${openApiPath(route.url)}`))

  t.test('the validator knows 3.1 and refuses a broken document', async (t) => {
    const validator = new Validator()
    const broken = structuredClone(doc)
    broken.paths[MANAGEMENT_PREFIX].post.responses = { 201: { content: 'not a media type map' } }
    t.equal((await validator.validate(broken)).valid, false, 'a broken document is refused')
    t.equal(validator.version, '3.1')
  })

  t.test('a valid OpenAPI 3.1 document whose references all resolve', async (t) => {
    t.equal(doc.openapi, '3.1.0')
    const validator = new Validator()
    const result = await validator.validate(structuredClone(doc))
    t.ok(result.valid, `valid: ${JSON.stringify(result.errors)}`)
    t.equal(validator.version, '3.1')
    for (const { at, ref } of refsOf(doc)) t.not(deref(doc, { $ref: ref }), undefined, `${at}: ${ref} resolves`)
  })

  t.test('info, the bearer scheme, the acting header and the problem schema', async (t) => {
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'))
    t.match(doc.info, { title: 'tenancy-gateway', version, description: /\S/ })
    t.match(doc.components.securitySchemes.bearerAuth, { type: 'http', scheme: 'bearer', description: /tgw_/ })
    const acting = doc.components.parameters.ActingTenant
    t.match(acting, { in: 'header', description: /self.*ext:/s })
    t.equal(acting.name.toLowerCase(), 'x-service-acting-tenant')
    const problem = doc.components.schemas.Problem
    t.same([...problem.required].sort(), ['code', 'detail', 'request_id', 'status', 'title', 'type'])
    t.match(problem.properties.errors.items, { required: ['path', 'message'] })
  })

  t.test('every management route the app serves is documented, and nothing else of it', async (t) => {
    t.ok(expected.has(`post ${MANAGEMENT_PREFIX}`), `the hook saw the management routes (${expected.size})`)
    const documented = new Set(
      Object.entries(doc.paths as Record<string, Json>)
        .filter(([path]) => path.startsWith(MANAGEMENT_PREFIX))
        .flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`)),
    )
    t.same([...documented].sort(), [...expected].sort())
  })

  t.test('each management operation: id, summary, tag, bearer key, acting header, problem+json errors', async (t) => {
    const tags = new Set((doc.tags as Json[]).map((tag) => tag.name))
    const operationIds = new Set<string>()
    for (const key of expected) {
      const [method, path] = key.split(' ') as [string, string]
      const op = doc.paths[path]?.[method]
      if (op === undefined) {
        t.fail(`${key} is not documented`)
        continue
      }
      t.match(op, { operationId: /^[a-zA-Z]+$/, summary: /\S/ }, `${key}: operationId and summary`)
      t.notOk(operationIds.has(op.operationId), `${key}: operationId ${op.operationId} is unique`)
      operationIds.add(op.operationId)
      t.ok(op.tags?.length > 0 && op.tags.every((tag: string) => tags.has(tag)), `${key}: declared tags (${op.tags})`)
      t.same(op.security, [{ bearerAuth: [] }], `${key}: the bearer key`)
      t.ok(
        (op.parameters as Json[]).some((parameter) => parameter.$ref === '#/components/parameters/ActingTenant'),
        `${key}: the acting header`,
      )
      const statuses = ['400', '401', '403', '503', 'default']
      if (path.includes('{')) statuses.push('404')
      if (method !== 'get') statuses.push('408', '413', '415')
      for (const status of statuses) t.ok(isProblemJson(doc, op.responses[status]), `${key}: ${status} is problem+json`)
      const successes = Object.keys(op.responses).filter((status) => /^2/.test(status))
      t.ok(successes.length > 0, `${key}: a success response`)
      for (const status of successes) {
        if (status === '204') t.notOk(op.responses[status].content, `${key}: 204 has no body`)
        else if (op.operationId === 'importApiKeys')
          t.same(Object.keys(op.responses[status].content ?? {}), ['application/x-ndjson'], `${key}: ndjson`)
        else if (op.operationId === 'exportUsage')
          t.same(
            Object.keys(op.responses[status].content ?? {}).sort(),
            ['application/x-ndjson', 'text/csv'],
            `${key}: ndjson or csv`,
          )
        else t.ok(op.responses[status].content?.['application/json']?.schema, `${key}: ${status} is application/json`)
      }
    }
    t.ok(
      isProblemJson(doc, doc.paths[MANAGEMENT_PREFIX].post.responses['409']),
      'an external_id conflict is documented',
    )
    t.match(deref(doc, doc.paths[MANAGEMENT_PREFIX].post.responses['409']).description, /external_id_conflict/)
    const roll = doc.paths[`${MANAGEMENT_PREFIX}/{sub_id}/api-keys/{key_id}/roll`].post
    t.ok(isProblemJson(doc, roll.responses['409']), 'a roll of a key that is not active is documented')
    t.match(deref(doc, roll.responses['409']).description, /key_not_active/)
    t.match(deref(doc, roll.responses['401']).description, /key_expired/, 'an expired key is documented')
  })

  t.test('what a linter asks of every operation: a server, a license, an operationId, a 4XX', async (t) => {
    t.same(doc.servers, [{ url: '/', description: 'The gateway that serves this document' }], 'relative to the gateway')
    t.match(doc.info.license, { name: 'Apache-2.0', identifier: 'Apache-2.0' })
    const operationIds: string[] = []
    for (const [path, item] of Object.entries(doc.paths as Record<string, Json>)) {
      for (const [method, op] of Object.entries(item as Record<string, Json>)) {
        if (method === 'servers') continue // a path item's own (POST /verify, on AUTHZ_PORT)
        t.match(op.operationId, /^[a-zA-Z]+$/, `${method} ${path}: an operationId`)
        operationIds.push(op.operationId)
        t.ok(
          Object.keys(op.responses).some((status) => /^4\d\d$/.test(status)),
          `${method} ${path}: a 4XX response (${Object.keys(op.responses)})`,
        )
      }
    }
    t.equal(new Set(operationIds).size, operationIds.length, 'operationIds are unique')
    for (const path of ['/healthz', '/readyz', '/.well-known/jwks.json', '/.well-known/oauth-authorization-server']) {
      const responses = doc.paths[path].get.responses
      t.match(deref(doc, responses['400']).description, /bad_request.*Host/, `${path}: 400 for a bad Host`)
      t.ok(isProblemJson(doc, responses['400']), `${path}: 400 is problem+json`)
      t.match(deref(doc, responses['431']).description, /headers_too_large/, `${path}: 431`)
    }
    t.ok(isProblemJson(doc, doc.paths['/.well-known/jwks.json'].get.responses['503']), 'the JWKS: 503 before a key')
    t.same(
      Object.keys(doc.paths['/oauth2/token'].post.responses['431'].content),
      ['application/json'],
      'the token endpoint: 431 as RFC 6749 JSON',
    )
  })

  t.test("every management call's 429 (MANAGEMENT_RATE), and the Location of what a 201 made", async (t) => {
    for (const [path, item] of Object.entries(doc.paths as Record<string, Json>)) {
      if (!path.startsWith('/v1/sub-accounts')) continue
      for (const [method, op] of Object.entries(item as Record<string, Json>)) {
        const limited = deref(doc, op.responses['429'])
        t.match(limited?.description, /rate_limited/, `${method} ${path}: 429`)
        t.ok(limited?.headers?.['Retry-After'], `${method} ${path}: 429 with Retry-After`)
      }
    }
    for (const path of [
      '/v1/sub-accounts',
      '/v1/sub-accounts/{sub_id}/api-keys/{key_id}/roll',
      '/v1/sub-accounts/webhook-endpoints',
    ])
      t.ok(doc.paths[path].post.responses['201'].headers?.Location, `POST ${path}: 201 with Location`)
  })

  t.test('a roll takes no body, and the document says its body is optional', async (t) => {
    const roll = doc.paths['/v1/sub-accounts/{sub_id}/api-keys/{key_id}/roll'].post
    t.equal(roll.requestBody.required, false, 'generated clients may send none')
    const parent = await gw.createParent()
    const sub = await gw.call(parent.apiKey, {
      method: 'POST',
      url: MANAGEMENT_PREFIX,
      body: { name: 'r' },
      acting: 'self',
    })
    const key = await gw.call(parent.apiKey, {
      method: 'POST',
      url: `${MANAGEMENT_PREFIX}/${sub.json().id}/api-keys`,
      body: { name: 'k', scopes: ['orders:read'] },
      acting: 'self',
    })
    t.equal(key.statusCode, 201, key.body)
    const rolled = await gw.call(parent.apiKey, {
      method: 'POST',
      url: `${MANAGEMENT_PREFIX}/${sub.json().id}/api-keys/${key.json().id}/roll`,
      acting: 'self',
    })
    t.equal(rolled.statusCode, 201, `rolled without a body: ${rolled.body}`)
  })

  t.test('`limit` is optional on every list, with the default the server applies', async (t) => {
    const lists = Object.entries(doc.paths as Record<string, Json>).flatMap(([path, item]) => {
      const limit = (item.get?.parameters as Json[] | undefined)?.find((p) => p.in === 'query' && p.name === 'limit')
      return limit === undefined ? [] : [{ path, limit }]
    })
    t.equal(lists.length, 9, `nine lists take a limit (${lists.map(({ path }) => path)})`)
    for (const { path, limit } of lists) {
      t.equal(limit.required, false, `${path}: limit is optional`)
      t.match(limit.schema, { type: 'integer', minimum: 1, maximum: 100, default: 20 }, `${path}: default 20`)
    }
    // 21 sub-accounts, and their 21 events: a page without `limit` holds 20.
    const parent = await gw.createParent()
    for (let i = 0; i < 21; i++) {
      const made = await gw.call(parent.apiKey, {
        method: 'POST',
        url: MANAGEMENT_PREFIX,
        body: { name: `s${i}` },
        acting: 'self',
      })
      t.equal(made.statusCode, 201, `sub-account ${i}`)
    }
    for (const path of [MANAGEMENT_PREFIX, `${MANAGEMENT_PREFIX}/events?type=sub_account.created`]) {
      const page = (await gw.call(parent.apiKey, { method: 'GET', url: path })).json()
      t.equal(page.data.length, 20, `${path}: 20 without a limit`)
      t.type(page.next_cursor, 'string', `${path}: and a next page`)
    }
  })

  t.test('the writes take an Idempotency-Key and document its refusals', async (t) => {
    const header = doc.components.parameters.IdempotencyKey
    t.match(header, { name: 'Idempotency-Key', in: 'header', required: false, schema: { maxLength: 255 } })
    for (const key of expected) {
      const [method, path] = key.split(' ') as [string, string]
      const op = doc.paths[path]?.[method]
      const takesKey = (op?.parameters as Json[] | undefined)?.some(
        (parameter) => parameter.$ref === '#/components/parameters/IdempotencyKey',
      )
      // The contract gives POST and PATCH keys; a DELETE repeated is a 404, and changes nothing.
      // A key import reads its body as a stream, and is idempotent itself (docs/key-imports.md).
      if (method === 'get' || method === 'delete' || path === '/v1/sub-accounts/api-keys/imports') {
        t.notOk(takesKey, `${key}: no Idempotency-Key`)
        continue
      }
      t.ok(takesKey, `${key}: the Idempotency-Key header`)
      t.ok(isProblemJson(doc, op.responses['422']), `${key}: 422 is problem+json`)
      t.match(deref(doc, op.responses['422']).description, /idempotency_key_reused/, `${key}: 422 reused`)
      t.match(deref(doc, op.responses['409']).description, /idempotency_key_in_flight/, `${key}: 409 in flight`)
      t.ok(deref(doc, op.responses['409']).headers?.['Retry-After'], `${key}: 409 with Retry-After`)
    }
  })

  t.test('no proxied route, and health routes (when the app has them) without a key', async (t) => {
    const served = new Set(routes.map((route) => route.url))
    for (const path of Object.keys(doc.paths)) {
      t.notMatch(path, /\*/, `${path}: no wildcard`)
      t.ok(
        path.startsWith(MANAGEMENT_PREFIX) ||
          ['/healthz', '/readyz', ...CREDENTIAL_PATHS, SECRET_SCANNING_GITHUB_PATH, VERIFY_PATH].includes(path),
        `${path}: served by the gateway itself`,
      )
    }
    t.notOk(
      Object.keys(doc.paths).some((path) => path.startsWith('/v1/shipments')),
      'the proxied prefix is not documented',
    )
    for (const path of ['/healthz', '/readyz'].filter((path) => served.has(path))) {
      t.ok(doc.paths[path]?.get, `${path} is documented`)
      t.same(doc.paths[path]?.get?.security ?? [], [], `${path} needs no key`)
    }
  })

  t.test('POST /verify: described on its own server, AUTHZ_PORT, without a key', async (t) => {
    const item = doc.paths[VERIFY_PATH]
    t.match(item?.servers, [{ url: 'http://{host}:{authz_port}', variables: { authz_port: {} } }], 'not PORT')
    t.match(item?.post, { operationId: 'verifyKey', tags: ['credentials'], security: [] })
    t.same(item?.post.requestBody.content['application/json'].schema.required, ['key'])
    const answers = item?.post.responses['200'].content['application/json'].schema.anyOf as Json[]
    t.same(
      answers.map((answer) => answer.properties.valid.const),
      [true, false],
      'an answer says valid, true or false',
    )
  })

  t.test('the credential endpoints: a form in, a token or an RFC 6749 error out', async (t) => {
    const token = doc.paths['/oauth2/token']?.post
    t.ok(token, 'POST /oauth2/token is documented')
    t.match(token, { operationId: 'issueAccessToken', summary: /\S/, tags: ['credentials'] })
    t.same(token.security, [{ clientSecretBasic: [] }, {}], 'HTTP Basic, or the form')
    t.match(doc.components.securitySchemes.clientSecretBasic, { type: 'http', scheme: 'basic' })
    const form = token.requestBody.content['application/x-www-form-urlencoded']?.schema
    t.ok(form, 'a form body')
    t.same(Object.keys(form.properties).sort(), ['client_id', 'client_secret', 'grant_type', 'scope'])
    t.same(Object.keys(token.requestBody.content), ['application/x-www-form-urlencoded'], 'a form only')
    t.same(Object.keys(token.responses['200'].content['application/json'].schema.properties).sort(), [
      'access_token',
      'expires_in',
      'scope',
      'token_type',
    ])
    for (const status of ['400', '401', '429', '431', '503']) {
      const media = token.responses[status]?.content
      t.same(Object.keys(media ?? {}), ['application/json'], `${status}: RFC 6749 JSON, not problem+json`)
      t.same(Object.keys(media['application/json'].schema.properties).sort(), ['error', 'error_description'])
    }
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/jwks.json']) {
      t.ok(doc.paths[path]?.get, `${path} is documented`)
      t.same(doc.paths[path]?.get?.security, [], `${path} needs no key`)
    }
    t.match(doc.components.securitySchemes.bearerAuth.description, /access token/)
  })

  t.test('the docs page and its assets load without a key', async (t) => {
    for (const page of ['/docs', '/docs/']) {
      const html = await get(page)
      t.equal(html.status, 200, `${page}: 200`)
      t.match(String(html.headers['content-type']), /^text\/html/, `${page}: HTML`)
      t.match(
        String(html.headers['content-security-policy']),
        /script-src 'self'/,
        `${page}: a content security policy`,
      )
      const assets = assetsOf(html.body)
      t.ok(
        assets.some((asset) => asset.endsWith('/swagger-ui-bundle.js')),
        `${page}: links the Swagger UI bundle`,
      )
      for (const asset of assets) {
        const path = new URL(asset, `http://gateway${page}`).pathname
        t.equal((await get(path)).status, 200, `${page}: ${path} loads`)
      }
    }
    const json = await get('/docs/json')
    t.equal(json.status, 200, 'the document the page loads')
    t.same(json.json(), doc, 'is the one at /openapi.json')
    const missing = await get('/docs/static/no-such-file.js')
    t.equal(missing.status, 404, 'a missing asset is a 404')
    t.match(String(missing.headers['content-type']), /^application\/problem\+json/, '… as problem+json')
  })

  t.test("every route's schemas compile: at first use, so no start fails on one", async (t) => {
    const broken: string[] = []
    let compiled = 0
    const compile = (what: string, build: () => unknown) => {
      try {
        build()
        compiled++
      } catch (err) {
        broken.push(`${what}: ${(err as Error).message}`)
      }
    }
    for (const { method, url, schema } of routes) {
      for (const part of ['body', 'querystring', 'params', 'headers'] as const)
        if (schema?.[part] !== undefined)
          compile(`${method} ${url} ${part}`, () => compiledValidator(schema[part], part))
      for (const [status, answer] of Object.entries((schema?.response ?? {}) as Record<string, Json>)) {
        const byType: Record<string, Json> =
          answer?.content === undefined
            ? { '': answer }
            : Object.fromEntries(Object.entries(answer.content as Json).map(([type, m]) => [type, (m as Json).schema]))
        for (const [type, body] of Object.entries(byType))
          compile(`${method} ${url} ${status} ${type}`, () => compiledSerializer(body))
      }
    }
    t.same(broken, [], 'none failed')
    t.ok(compiled > 100, `${compiled} validators and serializers compiled`)
  })

  t.test('nothing above reached the upstream', async (t) => {
    t.same(
      upstream.received.map((request) => `${request.method} ${request.url}`),
      [],
    )
  })
})

// Imported keys (docs/key-imports.md) where minted keys are tested beside them: the token endpoint
// and WebSockets. An imported key has no client secret, so POST /oauth2/token refuses it as it
// refuses a key without one (401 invalid_client), whatever is sent as the secret, and its roll
// gives a `tgw_` key with a secret that trades. On a websocket route an imported key, given as a
// value in its own format or imported by its SHA-256 only, opens a socket, and revoking it closes
// the socket with 1008, as a minted key's is.
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { basicAuthorization, clientKey, type TokenRequest, tokenRequest } from '../helpers/tokens.js'
import { openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

const upstream = await startWebSocketUpstream(t)
const gw = await startGateway(t, {
  env: { ISSUER_URL: 'https://gateway.test' },
  gatewayConfig: { routes: [{ prefix: '/live', upstream: upstream.url, websocket: true }] },
})
const parent = await gw.createParent()

const manage = (method: 'GET' | 'POST', path: string, json?: unknown) =>
  callAs(gw.url, parent.apiKey, { method, path: `/v1/sub-accounts${path}`, acting: 'self', ...(json ? { json } : {}) })

/** A foreign key the way Stripe writes one: `sk_live_` and 24 base62-ish characters. */
const stripeLike = () => `sk_live_${randomBytes(18).toString('base64url')}`
const sha256Hex = (value: string) => createHash('sha256').update(value).digest('hex')

/** A new sub-account with two imported keys: one given by value, one by its SHA-256 only. */
async function importedPair(): Promise<{ subId: string; byValue: Key; byDigest: Key }> {
  const sub = await manage('POST', '', { name: 'imported', external_id: `ext-${randomUUID()}` })
  const subId = sub.json().id as string
  const byValue = stripeLike()
  const byDigest = stripeLike()
  const body = [
    { sub_account_id: subId, name: 'by value', scopes: ['orders:read'], key: byValue },
    { sub_account_id: subId, name: 'by digest', scopes: ['orders:read'], key_sha256: sha256Hex(byDigest) },
  ]
    .map((line) => JSON.stringify(line))
    .join('\n')
  const res = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/api-keys/imports',
    acting: 'self',
    headers: [['Content-Type', 'application/x-ndjson']],
    body: `${body}\n`,
  })
  if (res.status !== 200) throw new Error(`import: ${res.status} ${res.body}`)
  const lines = res.body
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as { status?: string; key_id?: string })
  if (lines[0]?.status !== 'imported' || lines[1]?.status !== 'imported') throw new Error(`import: ${res.body}`)
  return {
    subId,
    byValue: { id: lines[0].key_id!, value: byValue },
    byDigest: { id: lines[1].key_id!, value: byDigest },
  }
}

interface Key {
  id: string
  value: string
}

t.test('the token endpoint: an imported key has no client secret and is refused as invalid_client', async (t) => {
  const minted = await clientKey(gw.url, parent, ['orders:read'])
  const control = await tokenRequest(gw.url, {
    form: { grant_type: 'client_credentials', client_id: minted.keyId, client_secret: minted.clientSecret },
  })
  t.equal(control.status, 200, 'a minted key and its client secret trade for a token')

  const { subId, byValue, byDigest } = await importedPair()
  const shown = (await manage('GET', `/${subId}/api-keys/${byValue.id}`)).json()
  t.equal(shown.origin, 'imported')
  t.notOk('client_secret' in shown, 'the imported key shows no client secret')
  for (const [name, key] of [
    ['by value', byValue],
    ['by digest', byDigest],
  ] as const) {
    // What a client of the old system might try: the key's value as the secret, by either method,
    // and no secret at all. Each is the one answer of RFC 6749 §5.2, never a 500 or a token.
    const attempts: TokenRequest[] = [
      { form: { grant_type: 'client_credentials', client_id: key.id, client_secret: key.value } },
      {
        form: { grant_type: 'client_credentials' },
        headers: [['Authorization', basicAuthorization(key.id, key.value)]],
      },
      { form: { grant_type: 'client_credentials', client_id: key.id } },
    ]
    for (const attempt of attempts) {
      const res = await tokenRequest(gw.url, attempt)
      t.equal(res.status, 401, `${name}: 401`)
      t.equal(res.json().error, 'invalid_client', `${name}: invalid_client`)
      t.match(res.headers['www-authenticate'], /^Basic realm="tenancy-gateway"/, `${name}: WWW-Authenticate`)
      t.notOk('access_token' in res.json(), `${name}: no token`)
    }
    // The key itself still works as a bearer key on the websocket route.
    const socket = await openSocket(t, `${gw.url}/live/feed`, { key: key.value })
    socket.ws.close()
  }

  // The way to a client secret is the roll: its `tgw_` key comes with one, which trades.
  const rolled = await manage('POST', `/${subId}/api-keys/${byDigest.id}/roll`, { expires_in_seconds: 0 })
  t.equal(rolled.status, 201, rolled.body.slice(0, 200))
  t.match(rolled.json(), { origin: 'minted', api_key: /^tgw_/, client_secret: /^tgws_/ })
  const traded = await tokenRequest(gw.url, {
    form: {
      grant_type: 'client_credentials',
      client_id: rolled.json().id as string,
      client_secret: rolled.json().client_secret as string,
    },
  })
  t.equal(traded.status, 200, "the rolled key's client secret trades for a token")
  t.equal(traded.json().token_type, 'Bearer')
})

t.test('WebSockets: an imported key opens a socket, and its revocation closes it', async (t) => {
  const { subId, byValue, byDigest } = await importedPair()
  const minted = await clientKey(gw.url, parent, ['orders:read'])
  const sockets = await Promise.all(
    [byValue.value, byDigest.value, minted.apiKey].map((key) => openSocket(t, `${gw.url}/live/feed`, { key })),
  )
  const [valueSocket, digestSocket, mintedSocket] = sockets as [
    (typeof sockets)[0],
    (typeof sockets)[0],
    (typeof sockets)[0],
  ]
  for (const [name, socket] of [
    ['by value', valueSocket],
    ['by digest', digestSocket],
  ] as const) {
    socket.ws.send(`hello ${name}`)
    t.equal(await socket.next(), `hello ${name}`, `${name}: the socket opened and echoes`)
  }

  for (const [name, key, socket] of [
    ['by value', byValue, valueSocket],
    ['by digest', byDigest, digestSocket],
  ] as const) {
    const revoked = await manage('POST', `/${subId}/api-keys/${key.id}/revoke`)
    t.equal(revoked.status, 200, `${name}: revoked`)
    const closed = await socket.closed
    t.same(
      { code: closed.code, reason: closed.reason },
      { code: 1008, reason: 'credentials revoked' },
      `${name}: closed`,
    )
    const refusal = await openSocket(t, `${gw.url}/live/feed`, { key: key.value }).then(
      () => null,
      (error: { status?: number }) => error.status,
    )
    t.equal(refusal, 401, `${name}: a new socket is refused`)
  }

  // The same as a minted key's socket.
  const revoked = await manage('POST', `/${minted.subId}/api-keys/${minted.keyId}/revoke`)
  t.equal(revoked.status, 200)
  const closed = await mintedSocket.closed
  t.same({ code: closed.code, reason: closed.reason }, { code: 1008, reason: 'credentials revoked' }, 'minted: closed')
})

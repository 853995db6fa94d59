// Which X-Request-Id a client may give the request (src/http/request-id.ts, docs/api.md#headers): a
// sane token that is not a credential; anything else gets an id of the gateway's own making.
import t from 'tap'
import { generate } from '../../src/auth/key-format.js'
import { isUsableRequestId, requestId } from '../../src/http/request-id.js'

const MADE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

t.test('a sane token is kept: logs join across hops', async (t) => {
  for (const id of [
    'req-123',
    'a',
    'A'.repeat(128),
    '6f1c2a34-9b1e-4c5d-8e7f-0a1b2c3d4e5f',
    'trace:span.7',
    'svc_a.b',
    'tgw',
    'tgw-1',
    'host.tgw',
    'ey',
    'eyj-lower',
  ])
    t.ok(isUsableRequestId(id), `kept: ${id}`)
})

t.test('anything else, and a credential of any kind, is not', async (t) => {
  const jwt = `${Buffer.from('{"alg":"ES256","typ":"at+jwt"}').toString('base64url')}.${Buffer.from('{"sub":"x"}').toString('base64url')}.c2ln`
  const cases: [string, string][] = [
    ['', 'empty'],
    ['A'.repeat(129), 'too long'],
    ['a b', 'a space'],
    ['a/b', 'a slash'],
    ['<script>', 'markup'],
    [generate('tgw_'), 'an API key'],
    [generate('tgws_'), 'a client secret'],
    [generate('tgwpl_'), 'a portal link token'],
    [generate('tgwps_'), 'a portal session'],
    ['tgw_', 'the bare key prefix'],
    ['TGW_abc', 'the key prefix in capitals'],
    ['Tgwps_abc', 'a session prefix in mixed case'],
    ['tgwx_abc', 'a later prefix of the same family'],
    [`key:${generate('tgw_')}`, 'a key after a separator'],
    [`req.${generate('tgwps_')}`, 'a session after a dot'],
    [jwt, 'a JWT'],
    [jwt.slice(0, jwt.lastIndexOf('.') + 1), 'a JWT without its signature'],
    [jwt.split('.')[0]!, "a JWT's header alone"],
    [`trace:${jwt}`, 'a JWT after a separator'],
    ['ewogImFsZyI6ICJub25lIgp9.eyJzdWIiOiJ4In0.', 'a JWT whose header is pretty-printed JSON'],
    ['abc.def.ghi', 'three base64url parts'],
    ['a.b.c.d.e', 'five base64url parts (JWE)'],
  ]
  for (const [id, what] of cases) t.notOk(isUsableRequestId(id), `refused: ${what}`)
})

t.test("requestId: the client's when usable, else one of the gateway's", async (t) => {
  t.equal(requestId({ headers: { 'x-request-id': 'req-1' } }), 'req-1')
  t.match(requestId({ headers: { 'x-request-id': generate('tgw_') } }), MADE)
  t.match(requestId({ headers: { 'x-request-id': ['a', 'b'] } }), MADE, 'sent twice')
  const first = requestId({ headers: {} })
  const second = requestId({ headers: {} })
  t.match(first, MADE)
  t.not(first, second, 'each made id is new')
})

import t from 'tap'
import {
  digest,
  generateApiKey,
  generateClientSecret,
  isWellFormedKey,
  isWellFormedSecret,
} from '../../src/auth/key-format.js'

t.test('a generated key has the documented shape and a valid checksum', async (t) => {
  const { apiKey, prefix, keyDigest } = generateApiKey()
  t.match(apiKey, /^tgw_[0-9A-Za-z]{49}$/)
  t.ok(isWellFormedKey(apiKey))
  t.equal(prefix, apiKey.slice(0, 12))
  t.same(keyDigest, digest(apiKey))
  t.equal(keyDigest.length, 32)
})

t.test('keys are unique', async (t) => {
  const keys = new Set(Array.from({ length: 1000 }, () => generateApiKey().apiKey))
  t.equal(keys.size, 1000)
})

t.test('one changed character breaks the checksum', async (t) => {
  const { apiKey } = generateApiKey()
  for (const position of [4, 20, apiKey.length - 7, apiKey.length - 1]) {
    const original = apiKey[position]!
    const replacement = original === 'a' ? 'b' : 'a'
    const tampered = apiKey.slice(0, position) + replacement + apiKey.slice(position + 1)
    t.notOk(isWellFormedKey(tampered), `position ${position}`)
  }
})

t.test('malformed keys are refused by shape', async (t) => {
  const { apiKey } = generateApiKey()
  for (const bad of [
    '',
    'tgw_',
    apiKey.slice(0, -1),
    `${apiKey}x`,
    apiKey.replace('tgw_', 'tgx_'),
    apiKey.toUpperCase(),
    ` ${apiKey}`,
  ]) {
    t.notOk(isWellFormedKey(bad), JSON.stringify(bad))
  }
})

t.test('client secrets have their own prefix and are not keys', async (t) => {
  const { clientSecret, secretDigest } = generateClientSecret()
  t.match(clientSecret, /^tgws_[0-9A-Za-z]{49}$/)
  t.ok(isWellFormedSecret(clientSecret))
  t.notOk(isWellFormedKey(clientSecret))
  t.notOk(isWellFormedSecret(generateApiKey().apiKey))
  t.same(secretDigest, digest(clientSecret))
})

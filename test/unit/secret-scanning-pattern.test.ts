// docs/secret-scanning.md gives GitHub the gateway's key format to scan for: its regular
// expression, and its checksum in words. Both are held here to the keys the gateway makes
// (src/auth/key-format.ts), the checksum computed again from the words alone.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { crc32 } from 'node:zlib'
import t from 'tap'
import { generateApiKey, generateClientSecret } from '../../src/auth/key-format.js'

const doc = readFileSync(join(import.meta.dirname, '../../docs/secret-scanning.md'), 'utf8')
const pattern = /\| regular expression \| `([^`]+)` \|/.exec(doc)?.[1]

/** The checksum as the doc says it: CRC32 of the first 47 characters, base62 `0-9A-Za-z`, six digits. */
function documentedChecksum(key: string): string {
  const digits = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
  let value = crc32(key.slice(0, 47))
  let out = ''
  while (value > 0) {
    out = digits[value % 62] + out
    value = Math.floor(value / 62)
  }
  return out.padStart(6, '0')
}

t.test('the regular expression finds every key, in text, and no client secret', async (t) => {
  t.ok(pattern, 'docs/secret-scanning.md names the regular expression')
  const regex = new RegExp(pattern!, 'g')
  for (let i = 0; i < 200; i++) {
    const { apiKey } = generateApiKey()
    t.same(`API_KEY=${apiKey}\n`.match(regex), [apiKey], 'found whole in a line of text')
    t.equal(apiKey.slice(-6), documentedChecksum(apiKey), 'its checksum as the doc says')
    t.same(`SECRET=${generateClientSecret().clientSecret}`.match(regex), null, 'a client secret is not found')
  }
})

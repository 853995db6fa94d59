// docs/api.md shows a sub-account, a key and a mint's answer with the fields the API sends, and
// docs/events.md a sub-account in an event: the examples and the mint's field list are held to the
// response schemas (issue 82: `key_policy` was missing from the sub-account, `ip_allowlist` from
// the mint's answer), and every key prefix they show is as long as a real one (it was 8 or 10
// characters in places, where the API shows 12).
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { generateApiKey } from '../../src/auth/key-format.js'
import { ApiKey, MintedApiKey } from '../../src/schemas/keys.js'
import { SubAccount } from '../../src/schemas/sub-accounts.js'

const ROOT = join(import.meta.dirname, '..', '..')
const read = (page: string) => readFileSync(join(ROOT, 'docs', page), 'utf8')
const doc = read('api.md')

/** The text of the `### <heading>` section, up to the next heading. */
function section(heading: string): string {
  return doc.split(`\n### ${heading}\n`)[1]?.split(/\n#{2,3} /)[0] ?? ''
}

/** The members of the section's first JSON example. */
function exampleFields(heading: string): string[] {
  const example = /```json\n([\s\S]*?)\n```/.exec(section(heading))?.[1] ?? '{}'
  return Object.keys(JSON.parse(example) as object).sort()
}

const fields = (schema: { properties: object }) => Object.keys(schema.properties).sort()

t.test("a sub-account's example has every field the API sends, and only those", async (t) => {
  t.same(exampleFields('Sub-accounts'), fields(SubAccount))
})

t.test("a key's example has every field the API sends, and only those", async (t) => {
  t.same(exampleFields('API keys of a sub-account'), fields(ApiKey))
})

t.test("the mint's answer is listed field by field", async (t) => {
  const listed = /the body has ([^.]+?), the last\s+two in this response only/.exec(
    section('API keys of a sub-account'),
  )
  t.ok(listed, 'the list was found')
  const names = [...(listed?.[1] ?? '').matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!).sort()
  t.same(names, fields(MintedApiKey))
})

t.test("the sub-account of docs/events.md's first example is whole", async (t) => {
  const example = /`sub_account.created`:\n\n```json\n([\s\S]*?)\n```/.exec(read('events.md'))?.[1] ?? '{}'
  const event = JSON.parse(example) as { data?: { object?: object } }
  t.same(Object.keys(event.data?.object ?? {}).sort(), fields(SubAccount))
})

t.test("the key of docs/events.md's api_key.created is whole", async (t) => {
  const example = /\n```json\n(\{"type": "api_key.created"[\s\S]*?)\n```/.exec(read('events.md'))?.[1] ?? '{}'
  const event = JSON.parse(example) as { data?: { object?: object } }
  t.same(Object.keys(event.data?.object ?? {}).sort(), [...fields(ApiKey), 'sub_account_id'].sort())
})

t.test('every key prefix the docs show is as long as the API makes it', async (t) => {
  const length = generateApiKey().prefix.length
  const pages = [
    ...readdirSync(join(ROOT, 'docs'))
      .filter((name) => name.endsWith('.md'))
      .map((name) => `docs/${name}`),
    'README.md',
  ]
  const shown = pages.flatMap((page) => {
    const text = readFileSync(join(ROOT, page), 'utf8')
    // `"prefix": "tgw_…"` in an object, and `(tgw_……)`, a key named by its prefix on a screen.
    const prefixes = [...text.matchAll(/"prefix": ?"(tgw_[^"]*)"/g), ...text.matchAll(/\((tgw_[A-Za-z0-9]+)…/g)]
    return prefixes.map((m) => ({ page, prefix: m[1]! }))
  })
  t.ok(shown.length >= 5, `the examples were found (${shown.length})`)
  t.same(
    shown.filter(({ prefix }) => prefix.length !== length),
    [],
    `prefixes of other than ${length} characters`,
  )
})

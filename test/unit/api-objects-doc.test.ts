// docs/api.md shows a sub-account, a key and a mint's answer with the fields the API sends, and
// docs/events.md a sub-account in an event: the examples and the mint's field list are held to the
// response schemas (issue 82: `key_policy` was missing from the sub-account, `ip_allowlist` from
// the mint's answer).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { ApiKey, MintedApiKey } from '../../src/schemas/keys.js'
import { SubAccount } from '../../src/schemas/sub-accounts.js'

const read = (page: string) => readFileSync(join(import.meta.dirname, '..', '..', 'docs', page), 'utf8')
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

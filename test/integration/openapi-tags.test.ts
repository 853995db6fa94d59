// The OpenAPI document's tags are the groups of /docs: each one it lists holds an operation, and
// each operation's tag is listed with its description, with the console on (the portal's sessions
// served) and off (not served: no `portal` group left empty); docs/api.md names them all.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest } from '../helpers/http.js'

interface Doc {
  tags?: { name: string; description?: string }[]
  paths: Record<string, Record<string, { tags?: string[] }>>
}

for (const consoleMode of ['on', 'off']) {
  t.test(
    `CONSOLE=${consoleMode}: every tag listed holds an operation, and every operation's tag is listed`,
    async (t) => {
      const gw = await startGateway(t, { env: { CONSOLE: consoleMode } })
      const res = await rawRequest(gw.url, { path: '/openapi.json' })
      t.equal(res.status, 200)
      const doc = res.json() as Doc
      const used = new Set(
        Object.values(doc.paths).flatMap((item) => Object.values(item).flatMap((op) => op.tags ?? [])),
      )
      const listed = (doc.tags ?? []).map((tag) => tag.name)
      t.same(
        listed.filter((name) => !used.has(name)),
        [],
        'tags with no operation',
      )
      t.same(
        [...used].filter((name) => !listed.includes(name)),
        [],
        'operations tagged with a tag not listed',
      )
      t.same(
        (doc.tags ?? []).filter((tag) => !tag.description),
        [],
        'tags without a description',
      )
      t.equal(used.has('portal'), consoleMode === 'on', 'the portal sessions are served with the console only')
      if (consoleMode === 'on') {
        const api = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'api.md'), 'utf8')
        const named = /and a tag \(([^)]*)\)/.exec(api)?.[1] ?? ''
        t.same(
          [...named.matchAll(/`([a-z-]+)`/g)].map((m) => m[1]),
          listed,
          "docs/api.md's list of tags",
        )
      }
    },
  )
}

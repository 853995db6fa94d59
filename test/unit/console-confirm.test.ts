// One home for asking before a destructive action in the console and the portal: every screen asks
// through `useAction().runIfConfirmed` (src/console/ui/components.tsx), none calls `confirm` itself.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'

const UI = new URL('../../src/console/ui/', import.meta.url).pathname

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sources(join(dir, entry.name)) : entry.name.endsWith('.tsx') ? [join(dir, entry.name)] : [],
  )
}

t.test("only components.tsx calls the browser's confirm", async (t) => {
  const callers = sources(UI)
    .filter((file) => /(?<![\w.])confirm\(/.test(readFileSync(file, 'utf8')))
    .map((file) => file.slice(UI.length))
  t.same(callers, ['components.tsx'])
  const askers = sources(UI).filter((file) => readFileSync(file, 'utf8').includes('runIfConfirmed('))
  t.ok(askers.length >= 4, `${askers.length} files ask through runIfConfirmed`)
})

// First start of an embedded database: nobody can run the CLI against it while the gateway holds
// it, so the gateway creates a parent account and prints its key, once (docs/configuration.md).
import { writeSync } from 'node:fs'
import { createParentWithKey } from './auth/mint.js'
import type { Sql } from './store/db.js'
import { countTenants } from './store/tenants.js'

export async function bootstrapEmbedded(sql: Sql): Promise<void> {
  const created = await sql.begin(async (tx) => {
    // Serialised against a concurrent bootstrap; only an empty database gets an account.
    await tx`lock table tenants in exclusive mode`
    if ((await countTenants(tx)) > 0) return null
    return createParentWithKey(tx, { name: 'default', externalId: null, extraScopes: [] })
  })
  if (created === null) return
  // One whole line on stdout, written synchronously so that no log line can interleave with it.
  writeSync(1, `bootstrap parent account ${created.account.id} key ${created.key.apiKey}\n`)
}

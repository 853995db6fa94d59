// First start of an embedded database: nobody can run the CLI against it while the gateway holds
// it, so the gateway creates a parent account and prints its key, once (docs/configuration.md),
// after it listens: a start that fails earlier must not spend the only showing of the key. It
// stands in for the operator's `accounts create`, and writes what that writes: the first key's
// api_key.created, by the operator
// (docs/decisions/0167-the-embedded-bootstrap-account-writes-what.md).
import { recordFirstKey } from './auth/key-changes.js'
import { createParentWithKey } from './auth/mint.js'
import { operatorOrigin } from './events/record.js'
import type { Sql } from './store/db.js'
import { countTenants } from './store/tenants.js'
import { inTransaction } from './store/transaction.js'

/**
 * `print` writes one whole line: main.ts passes the log's own stream, so that the line follows
 * the lines logged before it (`Server listening`), which pino writes asynchronously.
 */
export async function bootstrapEmbedded(sql: Sql, print: (line: string) => void): Promise<void> {
  const created = await inTransaction(sql, async (tx) => {
    // Serialised against a concurrent bootstrap; only an empty database gets an account.
    await tx`lock table tenants in exclusive mode`
    if ((await countTenants(tx)) > 0) return null
    const made = await createParentWithKey(tx, { name: 'default', externalId: null, extraScopes: [] })
    await recordFirstKey(tx, operatorOrigin(), made)
    return made
  })
  if (created === null) return
  print(`bootstrap parent account ${created.account.id} key ${created.key.apiKey}\n`)
}

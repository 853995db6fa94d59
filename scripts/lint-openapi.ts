// `npm run lint:openapi`: the gateway's OpenAPI document, as /openapi.json serves it, linted by
// Redocly's recommended rules (redocly.yaml says which rules are off, and why). The app is built
// in process on an embedded database in a temporary directory: no Postgres, Redis or port is
// needed, and nothing of the repository's .data is touched. Exits with redocly's status.
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildApp } from '../src/app.js'
import { loadConfig } from '../src/config.js'
import { ENCRYPTION_KEY_BYTES } from '../src/encryption/seal.js'
import { openStore } from '../src/store/db.js'
import { migrate } from '../src/store/migrate.js'

const REPO_ROOT = fileURLToPath(new URL('../', import.meta.url))

/** The document the app serves at /openapi.json, from an app on a throwaway embedded database. */
async function openApiDocument(dataDir: string): Promise<unknown> {
  const config = {
    ...loadConfig({ DATA_DIR: dataDir, ENCRYPTION_KEY: randomBytes(ENCRYPTION_KEY_BYTES).toString('base64') }),
    // Proxied routes are not in the document: the repository's route table would change nothing.
    gatewayConfig: {},
  }
  const store = await openStore({ databaseUrl: undefined, dataDir, holder: 'lint:openapi' })
  try {
    await migrate(store.sql)
    const app = await buildApp({ config, store, logger: false })
    try {
      const res = await app.inject({ method: 'GET', url: '/openapi.json' })
      if (res.statusCode !== 200) throw new Error(`GET /openapi.json answered ${res.statusCode}: ${res.body}`)
      return res.json()
    } finally {
      await app.close()
    }
  } finally {
    await store.close()
  }
}

async function main(): Promise<number> {
  const work = mkdtempSync(join(tmpdir(), 'lint-openapi-'))
  try {
    const file = join(work, 'openapi.json')
    writeFileSync(file, `${JSON.stringify(await openApiDocument(join(work, 'data')), null, 2)}\n`)
    const redocly = join(REPO_ROOT, 'node_modules', '.bin', 'redocly')
    const lint = spawnSync(redocly, ['lint', '--config', join(REPO_ROOT, 'redocly.yaml'), file], { stdio: 'inherit' })
    if (lint.error !== undefined) throw lint.error
    return lint.status ?? 1
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}

main().then(
  (status) => process.exit(status),
  (err: unknown) => {
    process.stderr.write(`lint:openapi: ${(err as Error).message}\n`)
    process.exit(1)
  },
)

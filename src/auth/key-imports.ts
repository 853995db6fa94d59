// Importing keys from elsewhere (docs/key-imports.md), for the management API and the CLI alike:
// the lines read from the body's spool (key-import-body.ts) go to the store a batch at a time, each batch
// a few queries and one writing statement, and the answer comes back a line per input line, then a
// summary. An imported key is a key like a minted one (its digest is SHA-256 of its value), so it
// authenticates, expires, rolls and revokes as one; a key of the account that has the value
// already is `exists`, so a file imported twice writes each key once.
import type { CacheInvalidator } from '../cache/index.js'
import { cacheKeys } from '../cache/index.js'
import { ApiError } from '../errors.js'
import { keyObject } from '../events/present-sql.js'
import type { Origin } from '../events/record.js'
import { eventId } from '../events/ulid.js'
import { checkExpiry, checkScopes, type KeyRules } from '../guardrails/mint-rules.js'
import type { Sql } from '../store/db.js'
import { existingKeys, type ImportedKey, importTenants, insertImportedKeys } from '../store/key-imports.js'
import { scopeCeiling } from '../store/tenants.js'
import type { SpooledBody } from './key-import-body.js'
import type { ImportEntry, ImportOwner, ReadLine } from './key-import-lines.js'

/**
 * How many lines go to the store together: each batch is one writing statement, under the main
 * pool's 1.5 s statement timeout (1,000 took about 0.4 s on a loaded two-core machine).
 */
export const IMPORT_BATCH_LINES = 500

export interface ImportRun {
  sql: Sql
  cache: CacheInvalidator
  /** The parent account: its sub-accounts' keys (the API), or its own (the CLI). */
  accountId: string
  owner: ImportOwner
  origin: Origin
  /** Check every line, write nothing. */
  dryRun: boolean
  nowMs?: number
}

export type ImportStatus = 'imported' | 'exists' | 'invalid'

export interface LineResult {
  line: number
  status: ImportStatus
  key_id?: string
  error?: string
}

export interface ImportSummary {
  lines: number
  imported: number
  exists: number
  invalid: number
  dry_run: boolean
}

/**
 * The answer's lines: one result per input line, in order, then `{"summary": …}`; ndjson text.
 * The lines come back from the body's spool a batch at a time; the spool is closed when the
 * answer ends, however it ends (done, a store failure, or its reader gone: `return()`).
 */
export async function* importAnswer(run: ImportRun, body: SpooledBody): AsyncGenerator<string> {
  try {
    const summary: ImportSummary = { lines: body.lines, imported: 0, exists: 0, invalid: 0, dry_run: run.dryRun }
    const ceiling = run.owner === 'sub-accounts' ? await scopeCeiling(run.sql, run.accountId) : null
    /** The repeated digests (hex) this import has seen, with the key they went to: a repeat is `exists`. */
    const seen = new Map<string, string | undefined>()
    const answer = async (batch: ReadLine[]) => {
      let text = ''
      for (const result of await importBatch(run, ceiling, batch, body.repeated, seen)) {
        summary[result.status]++
        text += `${JSON.stringify(result)}\n`
      }
      return text
    }
    let batch: ReadLine[] = []
    for await (const line of body.spool.lines()) {
      batch.push(line)
      if (batch.length < IMPORT_BATCH_LINES) continue
      yield await answer(batch)
      batch = []
    }
    if (batch.length > 0) yield await answer(batch)
    yield `${JSON.stringify({ summary })}\n`
  } finally {
    await body.spool.close()
  }
}

/** Why a line's key breaks its account's rules (scope ceiling, key policy), or null. */
function rulesProblem(rules: KeyRules, entry: ImportEntry, nowMs: number): string | null {
  try {
    checkScopes(rules, entry.scopes, '/scopes')
    checkExpiry(rules, entry.expiresAt, nowMs)
    return null
  } catch (err) {
    if (err instanceof ApiError) return err.detail.replace('/body/expires_at', '/expires_at')
    throw err
  }
}

async function importBatch(
  run: ImportRun,
  ceiling: string[] | null,
  batch: readonly ReadLine[],
  repeated: ReadonlySet<string>,
  seen: Map<string, string | undefined>,
): Promise<LineResult[]> {
  const { sql, accountId } = run
  const nowMs = run.nowMs ?? Date.now()
  const results = new Map<number, LineResult>()
  const entries: ImportEntry[] = []
  for (const read of batch) {
    if ('error' in read) results.set(read.line, { line: read.line, status: 'invalid', error: read.error })
    else entries.push(read.entry)
  }
  const ids = entries.flatMap((e) => ('subAccountId' in e.target ? [e.target.subAccountId] : []))
  const externalIds = entries.flatMap((e) => ('externalId' in e.target ? [e.target.externalId] : []))
  const tenants = run.owner === 'sub-accounts' ? await importTenants(sql, accountId, ids, externalIds) : []
  const byId = new Map(tenants.map((t) => [t.id, t]))
  const byExternalId = new Map(tenants.flatMap((t) => (t.external_id === null ? [] : [[t.external_id, t]])))
  const existing =
    entries.length === 0
      ? []
      : await existingKeys(
          sql,
          entries.map((e) => e.keyDigest),
        )
  const existingByDigest = new Map(existing.map((k) => [k.key_digest.toString('hex'), k]))

  const toWrite: { entry: ImportEntry; key: ImportedKey }[] = []
  /** Lines repeating a key of an earlier line of this batch: they take its id once written. */
  const repeats: ImportEntry[] = []
  for (const entry of entries) {
    const { line, target } = entry
    const tenant =
      'account' in target
        ? null
        : 'subAccountId' in target
          ? byId.get(target.subAccountId)
          : byExternalId.get(target.externalId)
    if (tenant === undefined) {
      results.set(line, { line, status: 'invalid', error: 'no such sub-account of this account' })
      continue
    }
    const hex = entry.keyDigest.toString('hex')
    const found = existingByDigest.get(hex)
    if (found !== undefined) {
      results.set(
        line,
        found.account_id === accountId
          ? { line, status: 'exists', key_id: found.id }
          : { line, status: 'invalid', error: 'another account has a key with this value: it cannot be imported here' },
      )
      continue
    }
    if (seen.has(hex)) {
      repeats.push(entry)
      continue
    }
    const problem = tenant === null ? null : rulesProblem({ ceiling, policy: tenant.key_policy_in_force }, entry, nowMs)
    if (problem !== null) {
      results.set(line, { line, status: 'invalid', error: problem })
      continue
    }
    // Only a digest that a later line gives again need be remembered (key-import-body.ts).
    if (repeated.has(hex)) seen.set(hex, undefined)
    toWrite.push({
      entry,
      key: {
        tenant_id: tenant === null ? accountId : tenant.id,
        name: entry.name,
        scopes: entry.scopes,
        prefix: entry.prefix,
        key_digest: hex,
        expires_at: entry.expiresAt?.toISOString() ?? null,
        event_id: eventId(),
      },
    })
  }
  if (run.dryRun) for (const { entry } of toWrite) results.set(entry.line, { line: entry.line, status: 'imported' })
  else await write(run, toWrite, results, seen)
  for (const { line, keyDigest } of repeats) {
    const keyId = seen.get(keyDigest.toString('hex'))
    results.set(line, keyId === undefined ? { line, status: 'exists' } : { line, status: 'exists', key_id: keyId })
  }
  return batch.map((read) => results.get('error' in read ? read.line : read.entry.line)!)
}

/** Writes the batch's new keys; a digest taken meanwhile (another import) is `exists` after all. */
async function write(
  run: ImportRun,
  toWrite: readonly { entry: ImportEntry; key: ImportedKey }[],
  results: Map<number, LineResult>,
  seen: Map<string, string | undefined>,
): Promise<void> {
  if (toWrite.length === 0) return
  const { origin } = run
  const rows = await insertImportedKeys(
    run.sql,
    run.accountId,
    {
      actor: origin.actor,
      requestId: origin.requestId,
      sourceIp: origin.sourceIp,
      object: (alias, account) => keyObject(alias, account),
    },
    toWrite.map((w) => w.key),
  )
  const written = new Map(rows.map((row) => [row.key_digest.toString('hex'), row.id]))
  const missing = toWrite.filter((w) => !written.has(w.key.key_digest))
  const taken =
    missing.length === 0
      ? []
      : await existingKeys(
          run.sql,
          missing.map((w) => w.entry.keyDigest),
        )
  const takenByDigest = new Map(taken.map((k) => [k.key_digest.toString('hex'), k]))
  for (const { entry, key } of toWrite) {
    const id = written.get(key.key_digest)
    const other = takenByDigest.get(key.key_digest)
    if (id !== undefined) {
      if (seen.has(key.key_digest)) seen.set(key.key_digest, id)
      results.set(entry.line, { line: entry.line, status: 'imported', key_id: id })
    } else if (other !== undefined && other.account_id === run.accountId) {
      results.set(entry.line, { line: entry.line, status: 'exists', key_id: other.id })
    } else {
      results.set(entry.line, {
        line: entry.line,
        status: 'invalid',
        error: 'another account has a key with this value: it cannot be imported here',
      })
    }
  }
  // A value tried before its import may be cached as unknown, on every replica.
  if (rows.length > 0) await run.cache.invalidate(rows.map((row) => cacheKeys.key(row.key_digest)))
}

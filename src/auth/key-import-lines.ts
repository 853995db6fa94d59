// A line of a key import (docs/key-imports.md), read on its own: its JSON, its fields, its key.
// The key's value is hashed here and dropped: only its SHA-256 digest and, when the value was
// given, its first four characters go on. No store is asked; key-imports.ts does the rest.
import { compiledValidator } from '../http/schema-compilers.js'
import { parseExpiresAt } from '../shared/key-expiry.js'
import { isUuid } from '../shared/identifiers.js'
import { isManagementScope, uniqueScopes } from '../shared/scopes.js'
import { ImportLine } from '../schemas/key-imports.js'
import { NAME_MAX_LENGTH } from '../schemas/common.js'
import { digest, FOREIGN_KEY_SHAPE, IMPORTED_PREFIX_LENGTH, isForeignKey, isWellFormedKey } from './key-format.js'

/** Where a line's key goes: a sub-account by id or external_id, or the account itself (the CLI's). */
export type ImportTarget = { subAccountId: string } | { externalId: string } | { account: true }

/** A line that reads well: what is written if its sub-account and scopes pass. */
export interface ImportEntry {
  line: number
  target: ImportTarget
  name: string
  scopes: string[]
  expiresAt: Date | null
  keyDigest: Buffer
  /** The first four characters of the key; empty when only its digest was given. */
  prefix: string
}

export type ReadLine = { entry: ImportEntry } | { line: number; error: string }

/** Whose keys the lines are: a parent's sub-accounts (the API), or the account itself (the CLI). */
export type ImportOwner = 'sub-accounts' | 'account'

const HEX_DIGEST = /^[0-9a-fA-F]{64}$/
// Standard or URL-safe base64 of 32 bytes: 43 characters and an optional `=`.
const BASE64_DIGEST = /^[A-Za-z0-9+/_-]{43}=?$/

/** A SHA-256 digest given as hex or base64, or null when it is neither. */
export function digestOf(text: string): Buffer | null {
  if (HEX_DIGEST.test(text)) return Buffer.from(text, 'hex')
  if (BASE64_DIGEST.test(text)) {
    const bytes = Buffer.from(text, 'base64')
    if (bytes.length === 32) return bytes
  }
  return null
}

/** Why a key's value cannot be imported, or null when it can. */
export function keyValueProblem(key: string): string | null {
  if (!FOREIGN_KEY_SHAPE.test(key)) return 'key must hold 16 to 256 printable ASCII characters without spaces'
  if (isWellFormedKey(key) || isForeignKey(key)) return null
  return "key starts with one of the gateway's own prefixes (tgw_, tgws_…) but is not a well-formed gateway key: give the key as it was issued"
}

const fail = (line: number, error: string): ReadLine => ({ line, error })

/** The first schema error of a line, as `/field message`. */
function schemaError(value: unknown): string | null {
  const validate = compiledValidator(ImportLine, 'body')
  if (validate(value)) return null
  const [first] = validate.errors ?? []
  if (first === undefined) return 'the line does not match an import line'
  const path = first.instancePath === '' ? '' : `${first.instancePath} `
  const extra = first.keyword === 'additionalProperties' ? ` (${String(first.params.additionalProperty)})` : ''
  return `${path}${first.message ?? 'is not valid'}${extra}`
}

/** One line of the body (its number from 1), read and checked. `nowMs`: what `expires_at` must be after. */
export function readImportLine(text: string, line: number, owner: ImportOwner, nowMs = Date.now()): ReadLine {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return fail(line, 'not JSON: each line holds one JSON object')
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return fail(line, 'not a JSON object: each line holds one key')
  const problem = schemaError(value)
  if (problem !== null) return fail(line, problem)
  const fields = value as {
    sub_account_id?: string
    external_id?: string
    name: string
    scopes: string[]
    expires_at?: string | null
    key?: string
    key_sha256?: string
  }
  const target = targetOf(fields, owner)
  if ('error' in target) return fail(line, target.error)
  const name = fields.name.trim()
  if ([...name].length < 1 || [...name].length > NAME_MAX_LENGTH)
    return fail(line, `/name must hold 1 to ${NAME_MAX_LENGTH} characters after trimming`)
  const reserved = fields.scopes.find(isManagementScope)
  if (owner === 'sub-accounts' && reserved !== undefined)
    return fail(line, `/scopes ${reserved} is for parent keys only`)
  let expiresAt: Date | null = null
  if (fields.expires_at != null) {
    const parsed = parseExpiresAt(fields.expires_at, nowMs)
    if ('error' in parsed) return fail(line, `/expires_at ${parsed.error}`)
    expiresAt = parsed.at
  }
  if ((fields.key === undefined) === (fields.key_sha256 === undefined))
    return fail(line, 'give the key as exactly one of key (its value) or key_sha256 (its SHA-256, hex or base64)')
  let keyDigest: Buffer
  let prefix = ''
  if (fields.key !== undefined) {
    const keyProblem = keyValueProblem(fields.key)
    if (keyProblem !== null) return fail(line, keyProblem)
    keyDigest = digest(fields.key)
    prefix = fields.key.slice(0, IMPORTED_PREFIX_LENGTH)
  } else {
    const given = digestOf(fields.key_sha256!)
    if (given === null) return fail(line, 'key_sha256 must be a SHA-256 digest: 64 hex digits, or 32 bytes in base64')
    keyDigest = given
  }
  return {
    entry: { line, target: target.target, name, scopes: uniqueScopes(fields.scopes), expiresAt, keyDigest, prefix },
  }
}

function targetOf(
  fields: { sub_account_id?: string; external_id?: string },
  owner: ImportOwner,
): { target: ImportTarget } | { error: string } {
  const { sub_account_id: id, external_id: externalId } = fields
  if (owner === 'account') {
    if (id !== undefined || externalId !== undefined)
      return { error: "this import is of the account's own keys: leave out sub_account_id and external_id" }
    return { target: { account: true } }
  }
  if ((id === undefined) === (externalId === undefined))
    return { error: 'name the sub-account by exactly one of sub_account_id or external_id' }
  if (id !== undefined) {
    if (!isUuid(id)) return { error: '/sub_account_id must be a UUID' }
    return { target: { subAccountId: id.toLowerCase() } }
  }
  return { target: { externalId: externalId! } }
}

// Ajv's errors as the fields of a 400 validation_failed (docs/api.md): one per field at fault,
// named by its JSON pointer. A nullable member is an `anyOf` of its schema and null, so a typo
// deep inside one fails both branches, and Ajv reports the typo, then "must be null" and "must
// match a schema in anyOf" at every level above it: the branch that got further is kept, the
// noise dropped.
import { DATE_TIME_RULE } from '../dates.js'
import type { FieldError } from '../errors.js'
import { UUID_PATTERN } from '../shared/identifiers.js'

export interface AjvErrorLike {
  instancePath: string
  schemaPath: string
  message?: string
  keyword: string
  params: Record<string, unknown>
  /** With Ajv's `verbose`: the schema holding the keyword (its `properties` name the known fields). */
  parentSchema?: { properties?: Record<string, unknown>; description?: string }
}

/**
 * What a value must be, where Ajv would only quote the pattern or format it failed: for an id of
 * any route, a date-time, and otherwise the schema's own description of the value.
 */
function ruleOf(e: AjvErrorLike): string | undefined {
  if (e.keyword === 'pattern' && e.params.pattern === UUID_PATTERN)
    return 'must be a UUID (8-4-4-4-12 hexadecimal digits, such as 3f0c9e5a-2b7d-4c1e-9a6f-8d2e4b1c0a57)'
  if (e.keyword === 'format' && e.params.format === 'date-time') return DATE_TIME_RULE
  const description = e.parentSchema?.description
  if ((e.keyword === 'pattern' || e.keyword === 'format') && description !== undefined)
    return `${e.message ?? 'is invalid'}: ${description}`
  return undefined
}

const ALTERNATIVES = new Set(['anyOf', 'oneOf'])
// Keywords that fail when the value is of another kind altogether than a branch describes.
const SHALLOW = new Set(['type', 'const', 'enum'])

/** The JSON Schema type as a phrase: "an object", "a string", "null". */
function kind(type: unknown): string {
  const name = String(type)
  if (name === 'null') return 'null'
  return /^[aeiou]/.test(name) ? `an ${name}` : `a ${name}`
}

/** What a branch that failed at its own top asked for. */
function wanted(error: AjvErrorLike): string {
  if (error.keyword === 'type') return kind(error.params.type)
  if (error.keyword === 'const') return JSON.stringify(error.params.allowedValue)
  return ((error.params.allowedValues as unknown[] | undefined) ?? []).map((v) => JSON.stringify(v)).join(', ')
}

/**
 * Replaces each anyOf/oneOf and its branches' errors, outermost first: by the errors of the one
 * branch that matched the value's kind and failed deeper, or, when every branch failed at the
 * value's kind, by one error naming the kinds allowed. Several deeper branches stay as Ajv said.
 */
export function withoutAlternativesNoise(errors: AjvErrorLike[]): AjvErrorLike[] {
  const alternatives = errors
    .filter((e) => ALTERNATIVES.has(e.keyword))
    .sort((a, b) => a.schemaPath.length - b.schemaPath.length)
  for (const alternative of alternatives) {
    const prefix = `${alternative.schemaPath}/`
    const branches = new Map<string, AjvErrorLike[]>()
    for (const e of errors) {
      if (!e.schemaPath.startsWith(prefix)) continue
      const branch = e.schemaPath.slice(prefix.length).split('/')[0]!
      branches.set(branch, [...(branches.get(branch) ?? []), e])
    }
    const shallow = (branch: AjvErrorLike[]) =>
      branch.every((e) => SHALLOW.has(e.keyword) && e.instancePath === alternative.instancePath)
    const deeper = [...branches.values()].filter((branch) => !shallow(branch))
    let replacement: AjvErrorLike[]
    if (deeper.length === 1) replacement = deeper[0]!
    else if (deeper.length === 0 && branches.size > 0) {
      const kinds = [...branches.values()].map((branch) => wanted(branch[0]!))
      replacement = [{ ...alternative, message: `must be ${kinds.join(' or ')}` }]
    } else continue
    const dropped = new Set(errors.filter((e) => e === alternative || e.schemaPath.startsWith(prefix)))
    // Another alternative was dropped with the branch it sat in: skip it on the next round.
    return withoutAlternativesNoise([...errors.filter((e) => !dropped.has(e)), ...replacement])
  }
  return errors
}

/** Ajv's errors on `context` (body, querystring…) as the problem's `errors`. */
export function fieldErrors(context: string, errors: AjvErrorLike[]): FieldError[] {
  return withoutAlternativesNoise(errors).map((e) => {
    const path = `/${context}${e.instancePath}`
    if (e.keyword === 'required') return { path: `${path}/${String(e.params.missingProperty)}`, message: 'is required' }
    if (e.keyword === 'additionalProperties') {
      const known = Object.keys(e.parentSchema?.properties ?? {})
      const allowed = known.length === 0 ? 'no fields are allowed here' : `allowed: ${known.join(', ')}`
      return { path: `${path}/${String(e.params.additionalProperty)}`, message: `is not a known field (${allowed})` }
    }
    return { path, message: ruleOf(e) ?? e.message ?? 'is invalid' }
  })
}

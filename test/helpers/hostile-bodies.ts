// Management bodies for the hostile-input properties (app.inject). A JSON document is generated as
// a tree, so that keys such as __proto__ can be written (also with \u escapes) and duplicated; the
// model parses the same text with JSON.parse, which is what JSON means, and says from docs/api.md
// what the gateway must answer.
import fc from 'fast-check'
import { EXTERNAL_ID } from './hostile-deployment.js'

export type Json =
  | { obj: [string, Json, boolean][] }
  | { arr: Json[] }
  | { str: string }
  | { num: number }
  | { bool: boolean }
  | { nul: true }

export function escapeKey(key: string): string {
  return `"${key
    .split('')
    .map(
      (c) =>
        `\\u${c
          .charCodeAt(0)
          .toString(16)
          .padStart(4, '0')
          .replace(/[a-f]/g, (h, i: number) => (i % 2 ? h.toUpperCase() : h))}`,
    )
    .join('')}"`
}

export function render(value: Json): string {
  if ('obj' in value)
    return `{${value.obj.map(([k, v, escaped]) => `${escaped ? escapeKey(k) : JSON.stringify(k)}:${render(v)}`).join(',')}}`
  if ('arr' in value) return `[${value.arr.map(render).join(',')}]`
  if ('str' in value) return JSON.stringify(value.str)
  if ('num' in value) return JSON.stringify(value.num)
  if ('bool' in value) return String(value.bool)
  return 'null'
}

/** A string as ajv's maxLength counts it: code points (a lone surrogate counts one). */
export const codePoints = (s: string) => [...s].length
export const LONE_SURROGATE = /(?:[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff])/

/**
 * A text field must be text: no U+0000 (README), and no lone surrogate, which is not a character
 * at all (Postgres cannot store it: text would silently become U+FFFD, jsonb refuses it).
 */
export const isText = (s: string) => !s.includes('\u0000') && !LONE_SURROGATE.test(s)

/** secure-json-parse's rule (README: `__proto__` and `constructor.prototype` are invalid_json); iterative, for deep documents. */
export function poisoned(root: unknown): boolean {
  const own = (o: object, k: string) => Object.hasOwn(o, k)
  const stack: unknown[] = [root]
  while (stack.length > 0) {
    const value = stack.pop()
    if (value === null || typeof value !== 'object') continue
    if (own(value, '__proto__')) return true
    if (own(value, 'constructor')) {
      const c = (value as Record<string, unknown>).constructor
      if (c !== null && typeof c === 'object' && own(c, 'prototype')) return true
    }
    stack.push(...Object.values(value))
  }
  return false
}

export const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v)

export function metadataValid(m: unknown): boolean {
  if (!isPlainObject(m)) return false
  const entries = Object.entries(m)
  if (entries.length > 50) return false
  return entries.every(
    ([k, v]) =>
      codePoints(k) >= 1 &&
      codePoints(k) <= 40 &&
      isText(k) &&
      typeof v === 'string' &&
      codePoints(v) <= 500 &&
      isText(v),
  )
}

export const nameShapeValid = (n: unknown) => typeof n === 'string' && codePoints(n) <= 1000 && isText(n)
export const nameValueValid = (n: string) => codePoints(n.trim()) >= 1 && codePoints(n.trim()) <= 200
export const externalIdValid = (e: unknown) => e === null || (typeof e === 'string' && EXTERNAL_ID.test(e))

export type Expected = { status: number; code?: string }

export function parseBody(text: string): { value: unknown } | Expected {
  if (Buffer.byteLength(text) > 64 * 1024) return { status: 413, code: 'payload_too_large' }
  if (text === '') return { value: undefined }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return { status: 400, code: 'invalid_json' }
  }
  return poisoned(value) ? { status: 400, code: 'invalid_json' } : { value }
}

export const invalid: Expected = { status: 400, code: 'validation_failed' }
export const onlyKeys = (o: Record<string, unknown>, allowed: string[]) =>
  Object.keys(o).every((k) => allowed.includes(k))

// Generators of management documents: mostly nearly valid, with one or two things wrong.
export const anyText = (max: number) =>
  fc.oneof(
    { weight: 6, arbitrary: fc.string({ unit: 'grapheme', maxLength: max }) },
    { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: max }) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '',
        ' ',
        '\u00a0\ufeff',
        '\t\n',
        '\u0000',
        'a\u0000',
        '\ud800',
        'x\udc00y',
        '\ud83d\ude00',
        '__proto__',
        'constructor',
        'toString',
        'a'.repeat(201),
        'a'.repeat(1001),
      ),
    },
  )
export const leaf = fc.oneof(
  anyText(20).map((s): Json => ({ str: s })),
  fc.double().map((n): Json => ({ num: Number.isFinite(n) ? n : 0 })),
  fc.boolean().map((b): Json => ({ bool: b })),
  fc.constant<Json>({ nul: true }),
)
export const { tree } = fc.letrec<{ tree: Json }>((tie) => ({
  tree: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    fc.array(tie('tree'), { maxLength: 3 }).map((arr): Json => ({ arr })),
    fc
      .array(
        fc.tuple(fc.constantFrom('a', 'name', '__proto__', 'constructor', 'prototype', 'x'), tie('tree'), fc.boolean()),
        { maxLength: 3 },
      )
      .map((obj): Json => ({ obj })),
  ),
}))
export const deep = fc.integer({ min: 1000, max: 20_000 }).map((n): Json => ({ str: `__deep_${n}__` }))
export const DEEP = /"__deep_(\d+)__"/g
/** Replaces deep markers with n nested arrays (too deep for a tree generator to build). */
export const deepen = (text: string) =>
  text.replace(DEEP, (_, n: string) => '['.repeat(Number(n)) + ']'.repeat(Number(n)))

export const metadataTree = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .array(
        fc.tuple(
          anyText(45),
          anyText(30).map((s): Json => ({ str: s })),
          fc.boolean(),
        ),
        { maxLength: 6 },
      )
      .map((obj): Json => ({ obj: obj.map(([k, v, e]) => [k, v, e && k.length < 12]) })),
  },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 49, max: 52 })
      .map((n): Json => ({ obj: Array.from({ length: n }, (_, i) => [`k${i}`, { str: 'v' }, false]) })),
  },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 499, max: 501 })
      .map((n): Json => ({ obj: [['long', { str: 'v'.repeat(n) }, false]] })),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom<Json>(
      { obj: [['__proto__', { obj: [['admin', { bool: true }, false]] }, false]] },
      { obj: [['__proto__', { str: 'x' }, true]] },
      { obj: [['constructor', { obj: [['prototype', { obj: [] }, false]] }, false]] },
      { obj: [['constructor', { str: 'x' }, false]] },
    ),
  },
  { weight: 2, arbitrary: tree },
  { weight: 1, arbitrary: deep },
  // Over the 64 KiB body limit: 413.
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 60_000, max: 80_000 })
      .map((n): Json => ({ obj: [['big', { str: 'x'.repeat(n) }, false]] })),
  },
)
export const nameTree = fc.oneof(
  { weight: 8, arbitrary: anyText(40).map((s): Json => ({ str: s })) },
  { weight: 1, arbitrary: fc.integer({ min: 150, max: 1100 }).map((n): Json => ({ str: ` ${'n'.repeat(n)}` })) },
  { weight: 2, arbitrary: tree },
)
export const externalIdTree = (taken: () => string[]) =>
  fc.oneof(
    { weight: 4, arbitrary: fc.stringMatching(/^[A-Za-z0-9._:@/+-]{1,20}$/).map((s): Json => ({ str: s })) },
    {
      weight: 2,
      arbitrary: fc.nat().map((i): Json => ({ str: taken()[i % Math.max(1, taken().length)] ?? 'acme-eu' })),
    },
    {
      weight: 1,
      arbitrary: fc.constantFrom<Json>(
        { nul: true },
        { str: '' },
        { str: 'has space' },
        { str: 'a'.repeat(129) },
        { str: 'é' },
        { num: 7 },
      ),
    },
    { weight: 1, arbitrary: tree },
  )

/** An object document from optional fields; sometimes an extra field, a repeated key or a poisoned one. */
export function documentOf(fields: [string, fc.Arbitrary<Json>][]): fc.Arbitrary<string> {
  const present = fields.map(([k, arb]) =>
    fc.option(
      arb.map((v): [string, Json, boolean] => [k, v, false]),
      { nil: undefined, freq: 4 },
    ),
  )
  const extra = fc.oneof(
    { weight: 6, arbitrary: fc.constant(undefined) },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom('extra', '__proto__', 'constructor', 'name', 'Name', ''), tree, fc.boolean()),
    },
  )
  const top = fc.oneof(
    {
      weight: 20,
      arbitrary: fc
        .tuple(fc.tuple(...present), extra)
        .map(([p, e]): Json => ({ obj: [...p.filter((x) => x !== undefined), ...(e ? [e] : [])] })),
    },
    { weight: 1, arbitrary: tree },
  )
  return top.map((doc) => deepen(render(doc)))
}

export interface SubState {
  id: string
  name: string
  external_id: string | null
  metadata: Record<string, string>
  status: 'active' | 'deactivated'
}

/** Equal as JSON objects, whatever the key order (jsonb reorders keys). */
export function sameJson(a: unknown, b: unknown): boolean {
  const sort = (v: unknown): unknown =>
    isPlainObject(v)
      ? Object.fromEntries(
          Object.keys(v)
            .sort()
            .map((k) => [k, sort(v[k])]),
        )
      : Array.isArray(v)
        ? v.map(sort)
        : v
  return JSON.stringify(sort(a)) === JSON.stringify(sort(b))
}

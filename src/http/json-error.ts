// Where a body stops being JSON, and why, for the 400 invalid_json (docs/api.md). JSON.parse says
// where on some errors only, and differently from one Node version to the next ("Unexpected end
// of JSON input" has no position; "Unexpected token … is not valid JSON" quotes the body instead):
// so a refused body is scanned again here, once, off the path of every body that parses.

export interface JsonSyntaxError {
  /** 1-based, as editors count. */
  readonly line: number
  /** 1-based, in characters (code points) of that line. */
  readonly column: number
  /** What the scanner expected there, and what it found. */
  readonly reason: string
}

const WHITESPACE = new Set([' ', '\t', '\n', '\r'])
const LITERALS = ['true', 'false', 'null']
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y
const ESCAPE = /\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})/y

/** `text`'s first syntax error, or null if it is JSON (RFC 8259). Iterative: no depth limit. */
export function findJsonSyntaxError(text: string): JsonSyntaxError | null {
  let i = 0
  // What is open, innermost last: '{' or '['.
  const open: string[] = []
  const skip = () => {
    while (i < text.length && WHITESPACE.has(text[i]!)) i++
  }
  const fail = (expected: string): JsonSyntaxError => at(text, i, expected)

  type Step = JsonSyntaxError | 'opened' | 'done'

  /** Reads a scalar ('done'), or the bracket that opens a container ('opened'). */
  const value = (): Step => {
    skip()
    const c = text[i]
    if (c === '{' || c === '[') {
      open.push(c)
      i++
      return 'opened'
    }
    if (c === '"') return string()
    if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) {
      NUMBER.lastIndex = i
      if (NUMBER.exec(text) === null) return fail('a number')
      i = NUMBER.lastIndex
      return 'done'
    }
    const literal = LITERALS.find((word) => text.startsWith(word, i))
    if (literal === undefined) return fail('a value (an object, array, string, number, true, false or null)')
    i += literal.length
    return 'done'
  }

  const string = (): Step => {
    i++
    while (i < text.length && text[i] !== '"') {
      if (text[i] === '\\') {
        ESCAPE.lastIndex = i
        if (ESCAPE.exec(text) === null)
          return fail('an escape (\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\u and 4 hex digits)')
        i = ESCAPE.lastIndex
      } else if (text.charCodeAt(i) < 0x20) {
        return fail('a control character in a string to be escaped (as \\u00XX)')
      } else i++
    }
    if (i >= text.length) return fail('the closing " of a string')
    i++
    return 'done'
  }

  /** A member's name and its colon. */
  const key = (): JsonSyntaxError | null => {
    skip()
    if (text[i] !== '"') return fail('a property name in double quotes')
    const step = string()
    if (step !== 'done') return step as JsonSyntaxError
    skip()
    if (text[i] !== ':') return fail("':' after the property name")
    i++
    return null
  }

  let step = value()
  for (;;) {
    if (typeof step === 'object') return step
    const inner = open.at(-1)
    if (inner === undefined) break
    skip()
    const close = inner === '{' ? '}' : ']'
    if (text[i] === close) {
      // An empty container, or the end of one with members.
      open.pop()
      i++
      step = 'done'
      continue
    }
    if (step === 'done') {
      if (text[i] !== ',') return fail(`',' or '${close}'`)
      i++
    }
    if (inner === '{') {
      const err = key()
      if (err !== null) return err
    }
    step = value()
  }
  skip()
  return i < text.length ? fail('the end of the body (one JSON value only)') : null
}

/** The error at index `index` of `text`: its line and column, and what was found there. */
function at(text: string, index: number, expected: string): JsonSyntaxError {
  const before = text.slice(0, index)
  const lineStart = Math.max(before.lastIndexOf('\n'), before.lastIndexOf('\r')) + 1
  const line = (before.match(/\r\n|\r|\n/g)?.length ?? 0) + 1
  const column = [...text.slice(lineStart, index)].length + 1
  const found =
    index >= text.length ? 'the end of the body' : JSON.stringify(String.fromCodePoint(text.codePointAt(index)!))
  return { line, column, reason: `expected ${expected}, found ${found}` }
}

// A YAML parse error as one line (GATEWAY_CONFIG, docs/configuration.md): the parser's reason and
// position, and the line at fault quoted. The yaml library counts lines from 1 (`linePos`), and
// puts that line in a code frame below its first line, which a one-line message would cut off.
// A quote or a flow collection ([ or {) left open is reported where the parser gave up, at the
// end of the file or on a later line: the line quoted is then the one where it opened.
import { Parser } from 'yaml'

/** What the parser throws: YAMLParseError's fields that are read here. */
export interface YamlErrorLike extends Error {
  pos?: [number, number]
  linePos?: { line: number; col: number }[]
}

// A line quoted at most this long: a file with other line ends than \n and \r\n is one long line.
const QUOTE_MAX = 200

interface Opening {
  offset: number
  /** The character that opened it: " ' [ or { */
  what: string
}

/** Whether a quoted scalar's source, as the lexer cut it, ends with its closing quote. */
function closedQuote(source: string): boolean {
  const quote = source[0]!
  if (source.length < 2 || !source.endsWith(quote)) return false
  // `"a\"` is still open: the last quote is escaped when an odd number of backslashes precede it.
  if (quote === '"') return (/\\*"$/.exec(source.slice(1))![0].length - 1) % 2 === 0
  return true
}

/** Every quote and flow collection of the document's tokens that is never closed. */
function unclosed(node: unknown, found: Opening[]): void {
  if (Array.isArray(node)) {
    for (const item of node) unclosed(item, found)
    return
  }
  if (node === null || typeof node !== 'object') return
  const token = node as { type?: string; offset?: number; source?: string; end?: { type: string }[] }
  if (token.type === 'double-quoted-scalar' || token.type === 'single-quoted-scalar') {
    if (!closedQuote(token.source ?? '')) found.push({ offset: token.offset!, what: token.source![0]! })
  } else if (token.type === 'flow-collection') {
    const start = (token as { start?: { source: string } }).start?.source ?? '['
    // Closed by its own bracket only: the lexer also ends a [ at a }.
    const end = start === '[' ? 'flow-seq-end' : 'flow-map-end'
    if (!(token.end ?? []).some((t) => t.type === end)) found.push({ offset: token.offset!, what: start })
  }
  for (const value of Object.values(token)) if (typeof value === 'object') unclosed(value, found)
}

/** The innermost quote or flow collection before `offset` that is never closed, if any. */
function openingBefore(text: string, offset: number): Opening | undefined {
  const found: Opening[] = []
  for (const token of new Parser().parse(text)) unclosed(token, found)
  return found.filter((o) => o.offset < offset).sort((a, b) => b.offset - a.offset)[0]
}

/** Line and column (from 1) of `offset` in `text`, counting lines as the yaml library does. */
function positionOf(text: string, offset: number): { line: number; col: number } {
  const before = text.slice(0, offset)
  const lineStart = before.lastIndexOf('\n') + 1
  return { line: (before.match(/\n/g)?.length ?? 0) + 1, col: offset - lineStart + 1 }
}

function quoteLine(text: string, line: number): string | undefined {
  const atFault = text.split('\n')[line - 1]?.replace(/\r$/, '')
  if (atFault === undefined) return undefined
  if (atFault.trim() === '') return 'an empty line'
  return JSON.stringify(atFault.length > QUOTE_MAX ? `${atFault.slice(0, QUOTE_MAX)}…` : atFault)
}

/** `err` (thrown by the yaml library's parse of `text`) as one line. */
export function yamlProblem(err: YamlErrorLike, text: string): string {
  const reason = err.message.split('\n')[0]!.replace(/:$/, '')
  const line = err.linePos?.[0]?.line
  if (line === undefined) return reason
  const opening = err.pos === undefined ? undefined : openingBefore(text, err.pos[0])
  if (opening !== undefined) {
    const at = positionOf(text, opening.offset)
    return `${reason}; the ${opening.what} opened at line ${at.line}, column ${at.col} is never closed: ${quoteLine(text, at.line)}`
  }
  const quoted = quoteLine(text, line)
  if (quoted === undefined) return reason
  return quoted === 'an empty line' ? `${reason}, an empty line` : `${reason}: ${quoted}`
}

// Postgres's text form of an array (the manual, "Array Value Input"), as the request log's JSON
// insert sends its rows' arrays (rows.ts): elements quoted only when they must be, and what
// Postgres text cannot hold replaced rather than failing a whole batch.

/** Characters that an array element must be quoted for (Postgres, "Array Value Input"). */
const SPECIAL = /[{},"\\\s]/
/** What Postgres text cannot hold (NUL), and what JSON cannot carry (a lone surrogate). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is looked for
const UNKEEPABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g
/** Text with none of either (nor any surrogate): almost every id, method, route, path and address. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is looked for
const PLAIN = /^[^{},"\\\s\u0000\ud800-\udfff]+$/

/** `NULL` in any case, which an array literal would read as SQL's NULL unless quoted. */
const isNullWord = (text: string) => text.length === 4 && text.toLowerCase() === 'null'

/** A text element of an array literal: quoted only when it must be (most never are). */
export function element(text: string): string {
  // One test for the common case, rather than a replace and a test.
  if (PLAIN.test(text) && !isNullWord(text)) return text
  // One such character would fail its whole batch, retried until dropped: it is kept as U+FFFD.
  text = text.replace(UNKEEPABLE, '\ufffd')
  if (!SPECIAL.test(text) && text.length !== 0 && !isNullWord(text)) return text
  return `"${text.replace(/["\\]/g, '\\$&')}"`
}

/** An array literal of numbers, or of texts already made elements. */
export function arrayOf(elements: readonly (string | number)[]): string {
  return `{${elements.join(',')}}`
}

/** An array literal of texts that may be SQL's NULL. */
export function nullableTexts(elements: readonly (string | null)[]): string {
  return arrayOf(elements.map((text) => (text === null ? 'NULL' : element(text))))
}

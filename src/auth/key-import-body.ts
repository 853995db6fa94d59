// The body of a key import (docs/key-imports.md), read as it arrives: split at each newline, each
// line read on its own (key-import-lines.ts) and only what it leaves kept, never the body whole
// nor any key's value. At most IMPORT_MAX_BYTES and IMPORT_MAX_LINES: past either, the reading
// stops and nothing is imported.
import { isUtf8 } from 'node:buffer'
import { IMPORT_MAX_BYTES, IMPORT_MAX_LINES } from '../schemas/key-imports.js'
import { type ImportOwner, type ReadLine, readImportLine } from './key-import-lines.js'

export interface ImportBodyLimits {
  maxBytes: number
  maxLines: number
}

export const IMPORT_LIMITS: ImportBodyLimits = { maxBytes: IMPORT_MAX_BYTES, maxLines: IMPORT_MAX_LINES }

export type ImportBody = { lines: ReadLine[] } | { tooLarge: 'bytes' | 'lines'; limit: number }

const NEWLINE = 0x0a

/** One line's bytes as read: a carriage return before the newline is dropped (CRLF files). */
function lineOf(bytes: Buffer, number: number, owner: ImportOwner, nowMs: number): ReadLine {
  const end = bytes.length > 0 && bytes[bytes.length - 1] === 0x0d ? bytes.length - 1 : bytes.length
  const text = bytes.subarray(0, end)
  if (!isUtf8(text)) return { line: number, error: 'not UTF-8: the file must be UTF-8' }
  if (text.length === 0 || /^\s*$/.test(text.toString('utf8')))
    return { line: number, error: 'an empty line: each line holds one JSON object' }
  return readImportLine(text.toString('utf8'), number, owner, nowMs)
}

/**
 * Reads the lines of `body` (an ndjson stream: a request's, or a file's). A last line without its
 * newline counts; nothing after the last newline is not a line.
 */
export async function readImportBody(
  body: AsyncIterable<Buffer | string>,
  owner: ImportOwner,
  limits: ImportBodyLimits = IMPORT_LIMITS,
  nowMs = Date.now(),
): Promise<ImportBody> {
  const lines: ReadLine[] = []
  let bytes = 0
  let partial: Buffer[] = []
  const add = (line: Buffer): boolean => {
    if (lines.length === limits.maxLines) return false
    lines.push(lineOf(line, lines.length + 1, owner, nowMs))
    return true
  }
  for await (const chunk of body) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    bytes += buffer.length
    if (bytes > limits.maxBytes) return { tooLarge: 'bytes', limit: limits.maxBytes }
    let start = 0
    for (let at = buffer.indexOf(NEWLINE); at !== -1; at = buffer.indexOf(NEWLINE, start)) {
      partial.push(buffer.subarray(start, at))
      const whole = partial.length === 1 ? partial[0]! : Buffer.concat(partial)
      partial = []
      start = at + 1
      if (!add(whole)) return { tooLarge: 'lines', limit: limits.maxLines }
    }
    // Copied: a slice would keep the whole chunk alive until its line ends.
    if (start < buffer.length) partial.push(Buffer.from(buffer.subarray(start)))
  }
  if (partial.length > 0 && !add(Buffer.concat(partial))) return { tooLarge: 'lines', limit: limits.maxLines }
  return { lines }
}

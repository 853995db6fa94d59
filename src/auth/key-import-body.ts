// The body of a key import (docs/key-imports.md), read as it arrives: split at each newline, each
// line read on its own (key-import-lines.ts) and what it leaves written to the import's spool
// (key-import-spool.ts), never held: neither the body whole nor any key's value is kept. At most
// IMPORT_MAX_BYTES and IMPORT_MAX_LINES: past either, the reading stops, the spool is closed, and
// nothing is imported.
import { isUtf8 } from 'node:buffer'
import { IMPORT_MAX_BYTES, IMPORT_MAX_LINES } from '../schemas/key-imports.js'
import { type ImportOwner, type ReadLine, readImportLine } from './key-import-lines.js'
import { ImportSpool, type SpoolBudget } from './key-import-spool.js'

export interface ImportBodyLimits {
  maxBytes: number
  maxLines: number
}

export const IMPORT_LIMITS: ImportBodyLimits = { maxBytes: IMPORT_MAX_BYTES, maxLines: IMPORT_MAX_LINES }

/** A body read whole and within its limits: its lines are in the spool, which the caller closes. */
export interface SpooledBody {
  spool: ImportSpool
  /** How many lines the body has. */
  lines: number
  /**
   * The digests (hex) that more than one line gives: only these are remembered across batches
   * (key-imports.ts), a few bytes each, where remembering every line's would be megabytes.
   */
  repeated: Set<string>
}

export type ImportBody = SpooledBody | { tooLarge: 'bytes' | 'lines'; limit: number }

const NEWLINE = 0x0a

/**
 * A line longer than this is invalid, and its bytes past it are not kept: the longest line the
 * schema lets through (a 200-character name, 50 scopes of 100) is under 8 KiB of compact JSON.
 */
export const IMPORT_LINE_MAX_BYTES = 64 * 1024

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
 * Reads the lines of `body` (an ndjson stream: a request's, or a file's) into a new spool in
 * `dir` (the system's temporary directory unless given). A last line without its newline counts;
 * nothing after the last newline is not a line. Over a limit, or if the body fails (a client
 * gone, its deadline), the spool is closed before this returns or throws.
 */
export async function readImportBody(
  body: AsyncIterable<Buffer | string>,
  owner: ImportOwner,
  options: { limits?: ImportBodyLimits; dir?: string; nowMs?: number; budget?: SpoolBudget } = {},
): Promise<ImportBody> {
  const { limits = IMPORT_LIMITS, nowMs = Date.now() } = options
  const spool = await ImportSpool.open(options.dir, options.budget ?? null)
  let kept = false
  try {
    const read = await spoolLines(body, owner, limits, nowMs, spool)
    kept = !('tooLarge' in read)
    return read
  } finally {
    if (!kept) await spool.close()
  }
}

async function spoolLines(
  body: AsyncIterable<Buffer | string>,
  owner: ImportOwner,
  limits: ImportBodyLimits,
  nowMs: number,
  spool: ImportSpool,
): Promise<ImportBody> {
  let lines = 0
  let bytes = 0
  let partial: Buffer[] = []
  /** Every digest given so far, as 32 one-byte characters (a third of hex's heap): dropped at the end. */
  const digests = new Set<string>()
  const repeated = new Set<string>()
  /** A line's bytes, or null for a line over IMPORT_LINE_MAX_BYTES; false past the line limit. */
  const add = async (bytes: Buffer | null): Promise<boolean> => {
    if (lines === limits.maxLines) return false
    lines++
    const read: ReadLine =
      bytes === null
        ? { line: lines, error: `longer than ${IMPORT_LINE_MAX_BYTES} bytes: each line holds one key` }
        : lineOf(bytes, lines, owner, nowMs)
    if ('entry' in read) {
      const digest = read.entry.keyDigest.toString('latin1')
      if (digests.has(digest)) repeated.add(read.entry.keyDigest.toString('hex'))
      else digests.add(digest)
    }
    await spool.add(read)
    return true
  }
  /** Bytes of the line under way; past IMPORT_LINE_MAX_BYTES its bytes are dropped as they come. */
  let partialBytes = 0
  const keep = (bytes: Buffer) => {
    partialBytes += bytes.length
    if (partialBytes <= IMPORT_LINE_MAX_BYTES) partial.push(bytes)
  }
  const endLine = async (): Promise<boolean> => {
    const whole =
      partialBytes > IMPORT_LINE_MAX_BYTES ? null : partial.length === 1 ? partial[0]! : Buffer.concat(partial)
    partial = []
    partialBytes = 0
    return add(whole)
  }
  for await (const chunk of body) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    bytes += buffer.length
    if (bytes > limits.maxBytes) return { tooLarge: 'bytes', limit: limits.maxBytes }
    let start = 0
    for (let at = buffer.indexOf(NEWLINE); at !== -1; at = buffer.indexOf(NEWLINE, start)) {
      keep(buffer.subarray(start, at))
      start = at + 1
      if (!(await endLine())) return { tooLarge: 'lines', limit: limits.maxLines }
    }
    // Copied: a slice would keep the whole chunk alive until its line ends.
    if (start < buffer.length) keep(Buffer.from(buffer.subarray(start)))
  }
  if (partialBytes > 0 && !(await endLine())) return { tooLarge: 'lines', limit: limits.maxLines }
  await spool.flush()
  return { spool, lines, repeated }
}

// The spool of a key import (docs/key-imports.md; docs/decisions/0371): what each line of the body
// left once read (key-import-lines.ts), a line of JSON each, in a temporary file, so that the
// import holds a batch in memory, never the whole body. It keeps the keys' digests, never their
// values. The file is unlinked as soon as it is open: it has no name while the import runs, so no
// way the import ends (done, client gone, an error, the process stopped or killed) leaves it on
// disk; closing its descriptor (or the process ending) frees its space.
import { randomUUID } from 'node:crypto'
import { type FileHandle, open, unlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ApiError } from '../errors.js'
import type { ImportEntry, ImportTarget, ReadLine } from './key-import-lines.js'

/** The spool's file name, before it is unlinked: `/proc/<pid>/fd` shows it as `… (deleted)`. */
export const SPOOL_FILE_PREFIX = 'tgw-key-import-'

/**
 * What the file system answers when the temporary directory is full, missing or not writable: the
 * import cannot run on this replica now, which is the operator's to fix, not the client's.
 */
const SPOOL_FAILURES = new Set([
  'ENOSPC',
  'EDQUOT',
  'EFBIG',
  'ENOENT',
  'ENOTDIR',
  'EACCES',
  'EPERM',
  'EROFS',
  'EMFILE',
  'ENFILE',
])

/**
 * A file system failure of the spool as `503 spool_unavailable` (nothing is imported: the spool is
 * written before any key is); any other error as it came.
 */
function spoolFailure(err: unknown, dir: string): unknown {
  const code = (err as NodeJS.ErrnoException | undefined)?.code
  if (code === undefined || !SPOOL_FAILURES.has(code)) return err
  const full = code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG'
  return new ApiError(
    'spool_unavailable',
    full
      ? "the gateway's temporary directory is full: nothing was imported; try again later"
      : 'the gateway cannot write to its temporary directory: nothing was imported; try again later',
    {
      // The rest of the body is not read.
      headers: { connection: 'close', 'retry-after': '60' },
      log: { message: 'a key import could not write its spool', fields: { dir, code, err } },
    },
  )
}

/**
 * The bytes a replica's spools may hold together (the chart's `tmpDir.sizeLimit` is 128Mi, past
 * which the pod is evicted, every request on it lost): a write past it fails the import that makes
 * it (`503 spool_unavailable`), not the directory. Given back as each spool closes.
 */
export class SpoolBudget {
  private used = 0
  readonly bytes: number
  constructor(bytes: number) {
    this.bytes = bytes
  }

  /** Takes `bytes`, or false when that would pass the budget. */
  take(bytes: number): boolean {
    if (this.used + bytes > this.bytes) return false
    this.used += bytes
    return true
  }

  giveBack(bytes: number): void {
    this.used -= bytes
  }
}

/** Writes are gathered to about this many bytes. */
const WRITE_CHUNK_BYTES = 64 * 1024

/** A line as the spool keeps it: short names, the digest in base64 (never longer than the line's key). */
type Record =
  | { l: number; err: string }
  | { l: number; t: ['s' | 'e', string] | ['a']; n: string; s: string[]; x: string | null; d: string; p: string }

function encode(read: ReadLine): string {
  if ('error' in read) return JSON.stringify({ l: read.line, err: read.error } satisfies Record)
  const { line, target, name, scopes, expiresAt, keyDigest, prefix } = read.entry
  const t: ['s' | 'e', string] | ['a'] =
    'subAccountId' in target ? ['s', target.subAccountId] : 'externalId' in target ? ['e', target.externalId] : ['a']
  const record: Record = {
    l: line,
    t,
    n: name,
    s: scopes,
    x: expiresAt?.toISOString() ?? null,
    d: keyDigest.toString('base64'),
    p: prefix,
  }
  return JSON.stringify(record)
}

function decode(text: string): ReadLine {
  const record = JSON.parse(text) as Record
  if ('err' in record) return { line: record.l, error: record.err }
  const [kind, value] = record.t
  const target: ImportTarget =
    kind === 's' ? { subAccountId: value! } : kind === 'e' ? { externalId: value! } : { account: true }
  const entry: ImportEntry = {
    line: record.l,
    target,
    name: record.n,
    scopes: record.s,
    expiresAt: record.x === null ? null : new Date(record.x),
    keyDigest: Buffer.from(record.d, 'base64'),
    prefix: record.p,
  }
  return { entry }
}

/** An open spool: lines appended while the body is read, then read back once, in order. */
export class ImportSpool {
  private pending: string[] = []
  private pendingBytes = 0
  private closed = false
  /** Bytes written to the file so far (the figure docs/operations.md bounds). */
  bytes = 0

  private readonly file: FileHandle
  private readonly dir: string
  private readonly budget: SpoolBudget | null

  private constructor(file: FileHandle, dir: string, budget: SpoolBudget | null) {
    this.file = file
    this.dir = dir
    this.budget = budget
  }

  /** Opens a new spool in `dir` (the system's temporary directory unless given), already unlinked. */
  static async open(dir: string = tmpdir(), budget: SpoolBudget | null = null): Promise<ImportSpool> {
    const path = join(dir, `${SPOOL_FILE_PREFIX}${randomUUID()}.ndjson`)
    // Readable by this user only: it holds digests of live keys, and names.
    let file: FileHandle
    try {
      file = await open(path, 'wx+', 0o600)
    } catch (err) {
      throw spoolFailure(err, dir)
    }
    try {
      await unlink(path)
    } catch (err) {
      await file.close()
      throw spoolFailure(err, dir)
    }
    return new ImportSpool(file, dir, budget)
  }

  /** Appends a line; the write happens once enough has gathered (or at `finish`). */
  async add(read: ReadLine): Promise<void> {
    const text = `${encode(read)}\n`
    this.pending.push(text)
    this.pendingBytes += text.length
    if (this.pendingBytes >= WRITE_CHUNK_BYTES) await this.flush()
  }

  /** Writes what has gathered: call once the last line is added, before `lines`. */
  async flush(): Promise<void> {
    if (this.pending.length === 0) return
    const chunk = Buffer.from(this.pending.join(''), 'utf8')
    this.pending = []
    this.pendingBytes = 0
    if (this.budget !== null && !this.budget.take(chunk.length))
      throw spoolFailure(
        Object.assign(new Error('the spools of this replica hold their budget'), { code: 'EDQUOT' }),
        this.dir,
      )
    try {
      await this.file.write(chunk, 0, chunk.length, this.bytes)
    } catch (err) {
      this.budget?.giveBack(chunk.length)
      throw spoolFailure(err, this.dir)
    }
    this.bytes += chunk.length
  }

  /** The lines from the first, read back from the file a chunk at a time. */
  async *lines(): AsyncGenerator<ReadLine> {
    let position = 0
    let partial: Buffer = Buffer.alloc(0)
    const buffer = Buffer.alloc(WRITE_CHUNK_BYTES)
    while (position < this.bytes) {
      const { bytesRead } = await this.file.read(buffer, 0, buffer.length, position)
      if (bytesRead === 0) break
      position += bytesRead
      // A chunk may end inside a line, even inside a character: the bytes after its last newline wait.
      const end = buffer.lastIndexOf(0x0a, bytesRead - 1)
      if (end === -1) {
        partial = Buffer.concat([partial, buffer.subarray(0, bytesRead)])
        continue
      }
      const text = Buffer.concat([partial, buffer.subarray(0, end)]).toString('utf8')
      partial = Buffer.from(buffer.subarray(end + 1, bytesRead)) // a copy: `buffer` is read into again
      for (const line of text.split('\n')) yield decode(line)
    }
  }

  /** Closes the file, which frees its space (it has no name since it was opened). Safe to call twice. */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.pending = []
    this.budget?.giveBack(this.bytes)
    await this.file.close()
  }
}

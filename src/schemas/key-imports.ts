// TypeBox schemas of a key import (docs/key-imports.md): a line of the ndjson body, the query, and
// the lines of the streamed answer, for the OpenAPI document. A body line is checked against
// ImportLine by auth/key-import-lines.ts; the answer is written by auth/key-imports.ts, not by a
// serializer.
import { Type } from 'typebox'
import { MAX_EXPIRY_YEARS } from '../shared/key-expiry.js'
import { Name } from './common.js'
import { Scope } from './keys.js'
import { ExternalId } from './sub-accounts.js'

/** At most this many lines in one import; a file with more is split. */
export const IMPORT_MAX_LINES = 100_000
/** At most this many bytes in one import's body (64 MiB). */
export const IMPORT_MAX_BYTES = 64 * 1024 * 1024

export const ImportLine = Type.Object(
  {
    sub_account_id: Type.Optional(Type.String({ maxLength: 64, description: 'the sub-account the key belongs to' })),
    external_id: Type.Optional(ExternalId),
    name: Name,
    scopes: Type.Array(Scope, { minItems: 1, maxItems: 50 }),
    expires_at: Type.Optional(
      Type.Union([Type.String({ format: 'date-time', maxLength: 64 }), Type.Null()], {
        description: `RFC 3339, in the future, at most ${MAX_EXPIRY_YEARS} years ahead; absent or null: never`,
      }),
    ),
    key: Type.Optional(
      Type.String({
        maxLength: 256,
        description: 'the key as deployed: 16–256 printable ASCII characters, no spaces; hashed at once, never stored',
      }),
    ),
    key_sha256: Type.Optional(
      Type.String({ maxLength: 100, description: 'or its SHA-256, as 64 hex digits or base64 (Unkey, for one)' }),
    ),
  },
  { additionalProperties: false },
)

/** The body as the OpenAPI document shows it: the route reads it as a stream, unvalidated by fastify. */
export const IMPORT_REQUEST_BODY = {
  required: true,
  description: `ndjson, one key a line; at most ${IMPORT_MAX_LINES} lines and 64 MiB`,
  content: { 'application/x-ndjson': { schema: ImportLine } },
}

export const ImportQuery = Type.Object(
  {
    dry_run: Type.Optional(Type.Boolean({ description: 'true: check every line, write nothing' })),
  },
  { additionalProperties: false },
)

export const ImportStatus = Type.Union([Type.Literal('imported'), Type.Literal('exists'), Type.Literal('invalid')], {
  description:
    '`imported`: written now (with `dry_run`, would be); `exists`: a key of this account has this value already; `invalid`: see `error`',
})

const ImportLineResult = Type.Object(
  {
    line: Type.Integer({ minimum: 1, description: 'the line of the body, from 1' }),
    status: ImportStatus,
    key_id: Type.Optional(Type.String({ format: 'uuid' })),
    error: Type.Optional(Type.String({ description: 'why the line is invalid, and what to do' })),
  },
  { additionalProperties: false },
)

const Count = Type.Integer({ minimum: 0 })

const ImportSummary = Type.Object(
  {
    summary: Type.Object(
      {
        lines: Count,
        imported: Count,
        exists: Count,
        invalid: Count,
        dry_run: Type.Boolean(),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, description: 'the last line' },
)

const ImportStopped = Type.Object(
  {
    error: Type.Object(
      { code: Type.String(), detail: Type.String() },
      { additionalProperties: false, description: 'the store failed: the lines answered stand; send the file again' },
    ),
  },
  { additionalProperties: false, description: 'the last line when the import stopped before its end' },
)

/** A line of the answer: a line's result, then the summary (or why it stopped). */
export const ImportAnswerLine = Type.Union([ImportLineResult, ImportSummary, ImportStopped])

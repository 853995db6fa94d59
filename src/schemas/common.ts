// TypeBox building blocks the management API's schema files share (docs/api.md): nullable members,
// timestamps, text Postgres can store, names, and the paging of lists (page, cursor, limit). Each
// resource's own schemas are in its *-schemas.ts file. Response schemas are also the serializers:
// a field they do not name (a key digest, say) cannot leave the gateway.
import { Type } from 'typebox'

export const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Union([schema, Type.Null()])

export const Timestamp = Type.String({ format: 'date-time' })

// Postgres text cannot hold U+0000, and jsonb refuses a lone UTF-16 surrogate (text would store
// U+FFFD instead): refuse both here as a 400 rather than fail, or change the text, in the store.
// Ajv compiles patterns with the u flag, so a surrogate pair (an emoji) is one character and passes.
export const STORABLE_TEXT = '^[^\\u0000\\ud800-\\udfff]*$'

// Names are checked again after trimming (1–200 characters); the schema only bounds the input.
export const NAME_MAX_LENGTH = 200
export const Name = Type.String({
  maxLength: 1000,
  pattern: STORABLE_TEXT,
  description: '1–200 characters after trimming',
})

export const Page = <T extends Parameters<typeof Type.Array>[0]>(item: T) =>
  Type.Object({ data: Type.Array(item), next_cursor: Nullable(Type.String()) }, { additionalProperties: false })

export const Cursor = Type.String({ minLength: 1, maxLength: 200, description: 'next_cursor of the previous page' })
/** A page's size when the query gives none: optional to clients, filled in by the validator (useDefaults). */
export const PAGE_LIMIT_DEFAULT = 20
export const Limit = Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: PAGE_LIMIT_DEFAULT }))

/** A page of a list that has no filter: its size and where it starts. */
export const PageQuery = Type.Object({ limit: Limit, cursor: Type.Optional(Cursor) }, { additionalProperties: false })

/** A route that takes no query parameters still refuses unknown ones. */
export const NoQuery = Type.Object({}, { additionalProperties: false })

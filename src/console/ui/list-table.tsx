// The shape every list screen repeats: its states (error, loading, empty, rows) and its table.
import type { ComponentChildren } from 'preact'
import { Empty, ErrorMessage, Loading } from './components.js'

/**
 * A list's states as the screens show them: its load's error; `Loading {what}…` while it has
 * neither rows nor an error; `empty` when it has no rows; else `table(rows)`.
 */
export function ListStates<T>({
  error,
  rows,
  what,
  empty,
  table,
}: {
  error: unknown
  rows: readonly T[] | null
  what: string
  empty: ComponentChildren
  table: (rows: readonly T[]) => ComponentChildren
}) {
  return (
    <>
      <ErrorMessage error={error} />
      {rows === null && error === null && <Loading what={what} />}
      {rows !== null && rows.length === 0 && <Empty>{empty}</Empty>}
      {rows !== null && rows.length > 0 && table(rows)}
    </>
  )
}

/**
 * The console's table: `<table class="cards">` in a `table-wrap` (a card a row under 600 px,
 * screens.css; each cell names its column in `data-label`), a caption for screen readers when
 * given, a head of `columns` (a `false` one left out), then the rows.
 */
export function CardTable({
  testId,
  caption,
  columns,
  children,
}: {
  testId: string
  caption?: string
  columns: readonly (string | false)[]
  children: ComponentChildren
}) {
  return (
    <div class="table-wrap">
      <table class="cards" data-testid={testId}>
        {caption !== undefined && <caption class="visually-hidden">{caption}</caption>}
        <thead>
          <tr>
            {columns.map(
              (name) =>
                name !== false && (
                  <th key={name} scope="col">
                    {name}
                  </th>
                ),
            )}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </div>
  )
}

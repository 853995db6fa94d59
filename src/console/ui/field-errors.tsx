// A 400's field errors beside the fields they name (`/body/scopes/1` under the scopes field), as
// well as in the form's alert: a sighted user sees where to look, and a screen reader hears the
// message as the field's description.
import { problemOfError } from './api.js'

export type FieldErrorMap = ReadonlyMap<string, string[]>

/**
 * The messages of a `validation_failed` error by the field they name under `base` (`/body`,
 * `/body/key_policy`). The API's messages are predicates ("is required"): one about a list's entry
 * (`…/scopes/1`) starts with the entry as sent (`sent`), unless it names it already; one about a
 * whole field starts with the field's `subjects` name.
 */
export function errorsByField(
  error: unknown,
  base: string,
  subjects: Record<string, string>,
  sent: Record<string, readonly string[]> = {},
): FieldErrorMap {
  const byField = new Map<string, string[]>()
  if (error === null || error === undefined) return byField
  for (const { path, message } of problemOfError(error).errors ?? []) {
    if (!path.startsWith(`${base}/`)) continue
    const [field = '', index] = path.slice(base.length + 1).split('/')
    if (!Object.hasOwn(subjects, field)) continue
    const entry = index === undefined ? undefined : sent[field]?.[Number(index)]
    const subject = index === undefined ? subjects[field] : entry
    const text = subject === undefined || message.startsWith(subject) ? message : `${subject} ${message}`
    byField.set(field, [...(byField.get(field) ?? []), text])
  }
  return byField
}

/** The ids an input is described by: its hint, and its errors when it has some. */
export function describedBy(...ids: (string | false | null | undefined)[]): string | undefined {
  const present = ids.filter((id): id is string => typeof id === 'string' && id !== '')
  return present.length === 0 ? undefined : present.join(' ')
}

export function FieldErrors({ id, messages }: { id: string; messages: string[] | undefined }) {
  if (messages === undefined || messages.length === 0) return null
  return (
    <ul id={id} class="field-error" data-testid={id}>
      {messages.map((message) => (
        <li key={message}>{message}</li>
      ))}
    </ul>
  )
}

/** A list typed one entry a line, or separated by commas or spaces; null when empty. */
export function listOf(text: string): string[] | null {
  const entries = text.split(/[\s,]+/).filter((entry) => entry !== '')
  return entries.length === 0 ? null : entries
}

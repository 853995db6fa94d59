// Pieces every screen uses: the error message, loading and empty states, the pager, dialogs, and
// the page's live region.
import type { ComponentChildren } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { advice, type Problem, problemOfError } from './api.js'

/** One polite live region for the whole page: what a screen found, what a change did. */
let announcer: (text: string) => void = () => {}
export function announce(text: string): void {
  announcer(text)
}

export function LiveRegion() {
  const [text, setText] = useState('')
  useEffect(() => {
    announcer = (next) => setText(next)
  }, [])
  return (
    <p class="live" aria-live="polite" aria-atomic="true" data-testid="live">
      {text}
    </p>
  )
}

export function ErrorMessage({ error }: { error: unknown }) {
  if (error === null || error === undefined) return null
  const p: Problem = problemOfError(error)
  return (
    <div class="error" role="alert" data-code={p.code}>
      <p class="error-title">
        <strong>{p.title}</strong>
        {p.status > 0 ? ` (${p.status} ${p.code})` : ''}
      </p>
      {p.detail !== '' && <p class="error-detail">{p.detail}</p>}
      {p.errors !== undefined && p.errors.length > 0 && (
        <ul>
          {p.errors.map((e) => (
            <li key={e.path}>
              <code>{e.path}</code>: {e.message}
            </li>
          ))}
        </ul>
      )}
      <p class="error-advice">{advice(p)}</p>
      {p.request_id !== undefined && <p class="error-id">Request id: {p.request_id}</p>}
    </div>
  )
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="loading" role="status">
      Loading {what}…
    </p>
  )
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>
}

/** Keyset paging: the cursors of the pages behind, so that Previous goes back. */
export function usePager() {
  const [stack, setStack] = useState<(string | null)[]>([null])
  const cursor = stack[stack.length - 1] ?? null
  return {
    cursor,
    page: stack.length,
    reset: () => setStack([null]),
    next: (c: string) => setStack([...stack, c]),
    previous: () => setStack(stack.slice(0, -1)),
  }
}

export function Pager({
  pager,
  nextCursor,
  label,
}: {
  pager: ReturnType<typeof usePager>
  nextCursor: string | null
  label: string
}) {
  return (
    <nav class="pager" aria-label={`${label} pages`}>
      <button type="button" disabled={pager.page === 1} onClick={pager.previous}>
        Previous page
      </button>
      <span>Page {pager.page}</span>
      <button type="button" disabled={nextCursor === null} onClick={() => nextCursor && pager.next(nextCursor)}>
        Next page
      </button>
    </nav>
  )
}

/** A modal dialog (the browser's own: focus kept inside, Escape closes, focus given back after). */
export function Dialog({
  title,
  onClose,
  children,
  wide = false,
}: {
  title: string
  onClose: () => void
  children: ComponentChildren
  /** Room for a table or JSON (an event's data), not only a sentence and a field. */
  wide?: boolean
}) {
  const ref = useRef<HTMLDialogElement>(null)
  useEffect(() => {
    const dialog = ref.current
    if (dialog !== null && !dialog.open) dialog.showModal()
    return () => dialog?.close()
  }, [])
  return (
    <dialog
      ref={ref}
      aria-labelledby="dialog-title"
      onClose={onClose}
      data-testid="dialog"
      class={wide ? 'wide' : undefined}
    >
      <h2 id="dialog-title">{title}</h2>
      {children}
      <div class="dialog-actions">
        <button type="button" onClick={() => ref.current?.close()}>
          Close
        </button>
      </div>
    </dialog>
  )
}

/** A secret shown once, in a field the user can select, with a copy button. */
export function SecretField({ label, value, id }: { label: string; value: string; id: string }) {
  const [copied, setCopied] = useState(false)
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(value)
      setCopied(true)
    } catch {
      const field = document.getElementById(id) as HTMLInputElement | null
      field?.select()
    }
  }
  return (
    <div class="secret">
      <label for={id}>{label}</label>
      <div class="secret-row">
        <input id={id} readOnly value={value} class="mono" data-secret="" />
        <button type="button" onClick={copy}>
          {copied ? 'Copied' : `Copy ${label.toLowerCase()}`}
        </button>
      </div>
    </div>
  )
}

/**
 * What a change did, shown where it was made (a save: "Limits saved at 20:05:13 UTC"), for the
 * eyes; the live region says it for screen readers, so this is no live region of its own.
 */
export function Confirmation({ text, testId = 'confirmation' }: { text: string | null; testId?: string }) {
  if (text === null) return null
  return (
    <p class="confirmation" data-testid={testId}>
      <span aria-hidden="true">✓ </span>
      {text}
    </p>
  )
}

/** `what` and the time (UTC, to the second), for a Confirmation: two saves in a row read apart. */
export function doneAt(what: string, at: Date = new Date()): string {
  return `${what} at ${at.toISOString().slice(11, 19)} UTC`
}

/**
 * A button that copies a value that is on the page anyway (an id; never a secret: SecretField
 * does those). Its accessible name says what it copies ("Copy the sub-account id"); "Copied" once
 * it has, said in the live region too.
 */
export function CopyButton({ value, what }: { value: string; what: string }) {
  const [copied, setCopied] = useState(false)
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(value)
      setCopied(true)
      announce(`Copied ${what}`)
      setTimeout(() => setCopied(false), 2000)
    } catch {
      announce(`Could not copy ${what}: select it and copy it`)
    }
  }
  return (
    <button type="button" class="copy" onClick={copy}>
      {copied ? 'Copied' : 'Copy'}
      <span class="visually-hidden"> {what}</span>
    </button>
  )
}

export function formatTime(value: string | null): string {
  if (value === null) return '—'
  return new Date(value)
    .toISOString()
    .replace('T', ' ')
    .replace(/\.\d+Z$/, ' UTC')
}

/**
 * Runs an action, keeps its error for display and tells the live region how it went. A run that a
 * later one of the same action (new filters, a new page) or the screen's end superseded is stale:
 * the action asks `current()` before it shows what it read, and its outcome is dropped, so that a
 * slow answer never replaces a newer one.
 */
export function useAction() {
  const [error, setError] = useState<unknown>(null)
  const [busy, setBusy] = useState(false)
  const latest = useRef(0)
  useEffect(
    () => () => {
      latest.current = Number.NaN // unmounted: every run is stale
    },
    [],
  )
  const run = async (action: (current: () => boolean) => Promise<void>, done?: string) => {
    const mine = ++latest.current
    const current = () => latest.current === mine
    setBusy(true)
    setError(null)
    try {
      await action(current)
      if (done !== undefined && current()) announce(done)
    } catch (err) {
      if (!current()) return
      setError(err)
      announce(`Failed: ${problemOfError(err).title}`)
    } finally {
      if (current()) setBusy(false)
    }
  }
  /**
   * Runs the action once the user says yes to `question`, in the browser's own confirm: modal,
   * read by screen readers, answered from the keyboard (every destructive action asks this way).
   */
  const runIfConfirmed = (question: string, action: (current: () => boolean) => Promise<void>, done?: string) => {
    if (confirm(question)) void run(action, done)
  }
  return { error, busy, run, runIfConfirmed, clear: () => setError(null) }
}

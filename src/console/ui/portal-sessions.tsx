// A sub-account's portal links (docs/console.md, Portal links): a one-time link to the sub-account
// portal for its people, with the permissions chosen, shown once with Copy; the sessions still
// open; End for each (DELETE: its page stops at once).
import { useEffect, useState } from 'preact/hooks'
import { api } from './api.js'
import { Confirmation, Dialog, doneAt, Empty, ErrorMessage, formatTime, SecretField, useAction } from './components.js'

/** The portal's permissions, as the form offers them (schemas/portal-sessions.ts has the list). */
const PERMISSIONS: [permission: string, text: string][] = [
  ['keys:read', 'see its API keys'],
  ['keys:write', 'mint, roll and revoke API keys'],
  ['usage:read', "see this month's usage and its credits"],
  ['requests:read', 'see its request log'],
]

/** How long a link and its session last (the API allows 60 s to an hour); the first the default. */
const LIFETIMES: [seconds: number, text: string][] = [
  [900, '15 minutes'],
  [3600, '1 hour'],
  [300, '5 minutes'],
]

interface PortalSession {
  id: string
  permissions: string[]
  created_at: string
  expires_at: string
  link_used: boolean
}

/** A session's short name for its controls: its id's first part. */
const sessionLabel = (s: PortalSession) => `${s.id.slice(0, 8)}…`

export function PortalSessionsSection({ subId }: { subId: string }) {
  const [sessions, setSessions] = useState<PortalSession[] | null>(null)
  const [made, setMade] = useState<{ url: string; expires_at: string } | null>(null)
  const [ended, setEnded] = useState<string | null>(null)
  const [reload, setReload] = useState(0)
  const load = useAction()
  const change = useAction()

  useEffect(() => {
    load.run(async (current) => {
      const page = await api<{ data: PortalSession[] }>('GET', `/${subId}/portal-sessions`)
      if (current()) setSessions(page.data)
    })
  }, [subId, reload])

  const create = (event: Event) => {
    event.preventDefault()
    const data = new FormData(event.currentTarget as HTMLFormElement)
    const body = {
      permissions: data.getAll('permission').map(String),
      expires_in_seconds: Number(data.get('lifetime')),
    }
    change.run(async () => {
      const session = await api<{ url: string; expires_at: string }>('POST', `/${subId}/portal-sessions`, body)
      setMade({ url: session.url, expires_at: session.expires_at })
      setReload((n) => n + 1)
    }, 'Portal link made: it is shown once')
  }
  const end = (session: PortalSession) =>
    change.runIfConfirmed(
      `End the portal session ${sessionLabel(session)}? Its page stops working at once.`,
      async () => {
        await api('DELETE', `/${subId}/portal-sessions/${session.id}`)
        setEnded(doneAt(`Session ${sessionLabel(session)} ended`))
        setReload((n) => n + 1)
      },
      'Portal session ended',
    )

  return (
    <section class="card" aria-labelledby="portal-title">
      <h2 id="portal-title">Portal links</h2>
      <p class="hint">
        A link for this sub-account's people to its own keys, usage and requests, with what you allow. It works once,
        until it expires.
      </p>
      <form onSubmit={create} data-testid="portal-form">
        <fieldset>
          <legend>They may</legend>
          {PERMISSIONS.map(([permission, text]) => (
            <label key={permission} class="check">
              <input
                type="checkbox"
                name="permission"
                value={permission}
                defaultChecked={permission !== 'keys:write'}
              />{' '}
              {text}
            </label>
          ))}
        </fieldset>
        <label for="portal-lifetime">Lasts</label>
        <select id="portal-lifetime" name="lifetime">
          {LIFETIMES.map(([seconds, text]) => (
            <option key={seconds} value={seconds}>
              {text}
            </option>
          ))}
        </select>
        <button type="submit" disabled={change.busy}>
          Make a portal link
        </button>
      </form>
      <ErrorMessage error={change.error} />
      <ErrorMessage error={load.error} />
      <Confirmation text={ended} testId="portal-confirmation" />
      {sessions !== null && sessions.length === 0 && <Empty>No portal session is open.</Empty>}
      {sessions !== null && sessions.length > 0 && (
        <div class="table-wrap">
          <table data-testid="portal-sessions" class="cards">
            <caption class="visually-hidden">Open portal sessions</caption>
            <thead>
              <tr>
                <th scope="col">Session</th>
                <th scope="col">Permissions</th>
                <th scope="col">Link</th>
                <th scope="col">Expires</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {sessions.map((s) => (
                <tr key={s.id} data-session-id={s.id}>
                  <td data-label="Session" class="mono">
                    {sessionLabel(s)}
                  </td>
                  <td data-label="Permissions" class="mono">
                    {s.permissions.join(' ')}
                  </td>
                  <td data-label="Link">{s.link_used ? 'opened' : 'not opened yet'}</td>
                  <td data-label="Expires">{formatTime(s.expires_at)}</td>
                  <td data-label="Actions" class="row-actions">
                    <button type="button" class="danger" disabled={change.busy} onClick={() => end(s)}>
                      End<span class="visually-hidden"> session {sessionLabel(s)}</span>
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {made !== null && (
        <Dialog title="Portal link" onClose={() => setMade(null)}>
          <p>
            Give this link to the sub-account's people: it is shown <strong>only this once</strong>, works once, and
            until {formatTime(made.expires_at)}.
          </p>
          <SecretField label="Link" value={made.url} id="portal-link" />
        </Dialog>
      )}
    </section>
  )
}

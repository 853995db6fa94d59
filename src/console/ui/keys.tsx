// A sub-account's API keys: list, mint (with an optional expiry), roll, revoke. A new key and its
// client secret are shown once, in a dialog; closing it drops them from the page.
import { useEffect, useState } from 'preact/hooks'
import { api, type Page, query } from './api.js'
import {
  announce,
  Dialog,
  Empty,
  ErrorMessage,
  formatTime,
  Loading,
  Pager,
  SecretField,
  usePager,
  useAction,
} from './components.js'
import type { ApiKey, MintedKey } from './types.js'

export function KeysSection({ subId }: { subId: string }) {
  const [page, setPage] = useState<Page<ApiKey> | null>(null)
  const [shown, setShown] = useState<{ title: string; key: MintedKey } | null>(null)
  const [reload, setReload] = useState(0)
  const pager = usePager()
  const load = useAction()
  const change = useAction()

  useEffect(() => {
    load.run(async (current) => {
      const next = await api<Page<ApiKey>>('GET', `/${subId}/api-keys${query({ limit: 20, cursor: pager.cursor })}`)
      if (current()) setPage(next)
    })
  }, [subId, pager.cursor, reload])

  const minted = (title: string, key: MintedKey) => {
    setShown({ title, key })
    setReload((n) => n + 1)
  }
  const roll = (key: ApiKey) => {
    const field = document.getElementById(`overlap-${key.id}`) as HTMLSelectElement | null
    const seconds = Number(field?.value ?? 86400)
    change.run(
      async () =>
        minted(
          'Key rolled',
          await api<MintedKey>('POST', `/${subId}/api-keys/${key.id}/roll`, { expires_in_seconds: seconds }),
        ),
      'Key rolled: the new key is shown once',
    )
  }
  const revoke = (key: ApiKey) => {
    if (!confirm(`Revoke the key ${key.name} (${key.prefix}…)? It stops working within a second.`)) return
    change.run(async () => {
      await api('POST', `/${subId}/api-keys/${key.id}/revoke`)
      setReload((n) => n + 1)
    }, 'Key revoked')
  }

  return (
    <section class="card" aria-labelledby="keys-title">
      <h2 id="keys-title">API keys</h2>
      <MintForm subId={subId} onMinted={(key) => minted('Key minted', key)} />
      <ErrorMessage error={change.error} />
      <ErrorMessage error={load.error} />
      {page === null && load.error === null && <Loading what="keys" />}
      {page !== null && page.data.length === 0 && <Empty>No keys yet.</Empty>}
      {page !== null && page.data.length > 0 && (
        <div class="table-wrap">
          <table data-testid="keys">
            <caption class="visually-hidden">API keys</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Prefix</th>
                <th scope="col">Scopes</th>
                <th scope="col">Status</th>
                <th scope="col">Expires</th>
                <th scope="col">Last used</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {page.data.map((k) => (
                <tr key={k.id} data-key-id={k.id}>
                  <td>{k.name}</td>
                  <td class="mono">{k.prefix}…</td>
                  <td class="mono">{k.scopes.join(' ')}</td>
                  <td>
                    <span class={`badge ${k.status}`}>{k.status}</span>
                  </td>
                  <td>{formatTime(k.expires_at)}</td>
                  <td>{formatTime(k.last_used_at)}</td>
                  <td class="row-actions">
                    {k.status === 'active' && (
                      <>
                        <label for={`overlap-${k.id}`} class="visually-hidden">
                          Old key of {k.name} keeps working for
                        </label>
                        <select id={`overlap-${k.id}`}>
                          <option value="86400">a day</option>
                          <option value="3600">an hour</option>
                          <option value="0">no time (revoke now)</option>
                        </select>
                        <button type="button" disabled={change.busy} onClick={() => roll(k)}>
                          Roll<span class="visually-hidden"> {k.name}</span>
                        </button>
                        <button type="button" class="danger" disabled={change.busy} onClick={() => revoke(k)}>
                          Revoke<span class="visually-hidden"> {k.name}</span>
                        </button>
                      </>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Keys" />}
      {shown !== null && (
        <Dialog
          title={shown.title}
          onClose={() => {
            setShown(null)
            announce('The key and its client secret are no longer shown')
          }}
        >
          <p>
            Copy the key and its client secret now: they are shown <strong>only this once</strong>.
          </p>
          <SecretField id="secret-key" label="API key" value={shown.key.api_key} />
          <SecretField id="secret-client" label="Client secret" value={shown.key.client_secret} />
          <p class="help">
            Key id <span class="mono">{shown.key.id}</span>, expires {formatTime(shown.key.expires_at)}.
          </p>
        </Dialog>
      )}
    </section>
  )
}

function MintForm({ subId, onMinted }: { subId: string; onMinted: (key: MintedKey) => void }) {
  const action = useAction()
  const submit = (e: Event) => {
    e.preventDefault()
    const formElement = e.currentTarget as HTMLFormElement
    const form = new FormData(formElement)
    const scopes = String(form.get('scopes') ?? '')
      .split(/[\s,]+/)
      .filter((s) => s !== '')
    const expires = String(form.get('expires_at') ?? '')
    action.run(async () => {
      const key = await api<MintedKey>('POST', `/${subId}/api-keys`, {
        name: String(form.get('name') ?? ''),
        scopes,
        // datetime-local is the user's local time; the API takes an instant with a zone.
        ...(expires === '' ? {} : { expires_at: new Date(expires).toISOString() }),
      })
      formElement.reset()
      onMinted(key)
    }, 'Key minted: it is shown once')
  }
  return (
    <form class="mint" onSubmit={submit} aria-labelledby="mint-title">
      <h3 id="mint-title">Mint a key</h3>
      <div class="field">
        <label for="mint-name">Name</label>
        <input id="mint-name" name="name" required maxLength={200} />
      </div>
      <div class="field">
        <label for="mint-scopes">Scopes (space or comma separated)</label>
        <input id="mint-scopes" name="scopes" required class="mono" placeholder="tracking:read tracking:write" />
      </div>
      <div class="field">
        <label for="mint-expires">Expires at (optional, your local time)</label>
        <input id="mint-expires" name="expires_at" type="datetime-local" />
      </div>
      <ErrorMessage error={action.error} />
      <button type="submit" disabled={action.busy}>
        Mint key
      </button>
    </form>
  )
}

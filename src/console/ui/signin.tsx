// Sign-in: the parent key is checked with one read, then kept in sessionStorage (this tab only).
import { ApiError, api, type Problem, session } from './api.js'
import { ErrorMessage, useAction } from './components.js'

const NOT_A_KEY = new ApiError({
  status: 0,
  code: 'not_a_key',
  title: 'That is not a key',
  detail: 'A key is one word of letters, digits and signs (tgw_…): this has spaces or other characters in it.',
})

export function SignIn({ refused, onSignedIn }: { refused: Problem | null; onSignedIn: () => void }) {
  const action = useAction()
  // The key is read from the field on submit, never kept in component state: state outlives the
  // screen in Preact's hooks, and signing out must leave nothing of the key in the page.
  const submit = (e: Event) => {
    e.preventDefault()
    const form = e.currentTarget as HTMLFormElement
    const field = form.elements.namedItem('key') as HTMLInputElement
    action.run(async () => {
      const key = field.value.trim()
      // A header carries ASCII only: fetch would throw, and "the gateway did not answer" mislead.
      if (!/^[\x21-\x7e]+$/.test(key)) throw NOT_A_KEY
      session.signIn(key)
      try {
        await api('GET', '/limits')
      } catch (err) {
        session.signOut()
        throw err
      }
      field.value = ''
      onSignedIn()
    }, 'Signed in')
  }
  return (
    <main class="signin" id="main">
      <h1>Sign in to the tenancy-gateway console</h1>
      <p class="lead">
        tenancy-gateway is the reverse proxy in front of your API: here a parent account manages its sub-accounts, their
        API keys, limits, usage and webhooks.
      </p>
      {refused !== null && action.error === null && (
        <div class="error" role="alert" data-code={refused.code}>
          <p class="error-title">
            <strong>You were signed out: {refused.title}</strong> ({refused.status} {refused.code})
          </p>
          <p class="error-detail">{refused.detail}</p>
          <p class="error-advice">The key was refused (revoked, expired or unknown): sign in again.</p>
        </div>
      )}
      <form onSubmit={submit} aria-describedby="signin-help">
        <label for="key">Parent API key</label>
        <input id="key" name="key" type="password" autocomplete="off" spellcheck={false} required />
        <p id="signin-help" class="help">
          A key of the parent account with <code>sub_accounts:read</code> and <code>sub_accounts:write</code>. With the
          embedded database, the gateway prints one on its first start; with your own Postgres, the operator makes one
          with <code>npm run cli -- accounts create</code> or <code>keys create</code>. It is kept in this tab only, and
          sent only to this gateway.
        </p>
        <button type="submit" disabled={action.busy}>
          Sign in
        </button>
      </form>
      <ErrorMessage error={action.error} />
    </main>
  )
}

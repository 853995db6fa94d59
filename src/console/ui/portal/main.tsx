// The sub-account portal's page (docs/portal.md): the link's one-time token read from the address's
// fragment and removed from it at once, exchanged for the session (a cookie; a bearer in memory
// when framed), then the screens the session's permissions grant (#/keys, #/usage and #/credits,
// #/requests). When the session ends (used link, expiry, ended by the provider), the page says so
// and calls no more.
import '../console.css'
import '../screens.css'
import './portal.css'
import { type ComponentChildren, render } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { type Problem, problemOfError } from '../api.js'
import { ErrorMessage, formatTime, LiveRegion, Loading } from '../components.js'
import { endSession, isEmbedded, openSession, type Permission, type PortalSession, whenSessionEnds } from './api.js'
import { CreditsScreen } from './credits.js'
import { KeysScreen, RequestsScreen, UsageScreen } from './screens.js'

/**
 * The link's token, from the fragment (never sent to the gateway), and the fragment removed from
 * the address bar and history at once: a screenshot, a shared screen or Back never shows it. A
 * fragment that starts with `/` is a screen's route, not a token.
 */
function takeToken(): string | null {
  const fragment = location.hash.replace(/^#/, '')
  if (fragment === '' || fragment.startsWith('/')) return null
  history.replaceState(history.state, '', `${location.pathname}${location.search}`)
  return fragment
}

const token = takeToken()
const embedded = isEmbedded()

const SCREENS = [
  { path: '/keys', label: 'API keys', needs: ['keys:read', 'keys:write'] },
  { path: '/usage', label: 'Usage', needs: ['usage:read'] },
  { path: '/credits', label: 'Credits', needs: ['usage:read'] },
  { path: '/requests', label: 'Requests', needs: ['requests:read'] },
] as const satisfies readonly { path: string; label: string; needs: readonly Permission[] }[]

const currentPath = () => location.hash.replace(/^#/, '')

/** setTimeout's longest delay (about 24.8 days); a session lasts an hour at most. */
const MAX_DELAY = 2 ** 31 - 1

function Ended({
  problem,
  session,
  children,
}: {
  problem: Problem
  session: PortalSession | null
  children: ComponentChildren
}) {
  const heading = useRef<HTMLHeadingElement>(null)
  useEffect(() => heading.current?.focus(), [])
  return (
    <>
      <header class="top">
        <p class="brand">Account portal</p>
      </header>
      <main id="main" class="ended" data-testid="ended">
        <h1 ref={heading} tabIndex={-1}>
          {session === null ? 'This portal link cannot be used' : 'Your portal session has ended'}
        </h1>
        <div class="error" role="alert" data-code={problem.code}>
          {/* The advice below says what to do: the gateway's own advice is not said twice. */}
          <p class="error-detail">
            {(problem.detail || problem.title).replace(/: ask your provider for a new .*$/, '.')}
          </p>
          <p class="error-advice">
            <strong>Ask your provider for a new link</strong>: a portal link works once, for a limited time.
          </p>
        </div>
        {session?.return_url && (
          <p>
            <a href={session.return_url} target="_top" rel="noreferrer">
              Return to your provider's site
            </a>
          </p>
        )}
        {children}
      </main>
    </>
  )
}

function Shell({ session, children }: { session: PortalSession; children: ComponentChildren }) {
  const main = useRef<HTMLElement>(null)
  const [path, setPath] = useState(currentPath())
  useEffect(() => {
    const onHash = () => {
      setPath(currentPath())
      main.current?.focus()
    }
    addEventListener('hashchange', onHash)
    return () => removeEventListener('hashchange', onHash)
  }, [])
  const granted = SCREENS.filter((s) => s.needs.some((p) => session.permissions.includes(p)))
  const shown = granted.find((s) => s.path === path) ?? granted[0]
  const has = (p: Permission) => session.permissions.includes(p)
  return (
    <>
      <header class="top">
        <button type="button" class="skip" onClick={() => main.current?.focus()}>
          Skip to content
        </button>
        <p class="brand">
          Account portal: <span data-testid="portal-account">{session.sub_account.name}</span>
        </p>
        {granted.length > 1 && (
          <nav aria-label="Sections">
            <ul>
              {granted.map((s) => (
                <li key={s.path}>
                  <a href={`#${s.path}`} aria-current={shown === s ? 'page' : undefined}>
                    {s.label}
                  </a>
                </li>
              ))}
            </ul>
          </nav>
        )}
        {session.return_url !== null && (
          <a class="return" href={session.return_url} target="_top" rel="noreferrer">
            Return to your provider
          </a>
        )}
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        {shown?.path === '/keys' && (
          <KeysScreen canRead={has('keys:read')} canWrite={has('keys:write')} policy={session.key_policy} />
        )}
        {shown?.path === '/usage' && <UsageScreen />}
        {shown?.path === '/credits' && <CreditsScreen />}
        {shown?.path === '/requests' && <RequestsScreen canReadKeys={has('keys:read')} />}
        <p class="help session-end">This session ends at {formatTime(session.expires_at)}.</p>
        {children}
      </main>
    </>
  )
}

/**
 * The exchange failed for another reason than a refused link (the gateway or its database away, a
 * network error): the token is still in memory and the link unused, so the user may try again.
 */
function OpenFailed({ error, onRetry }: { error: unknown; onRetry: () => void }) {
  return (
    <main id="main" data-testid="open-failed">
      <h1>The portal could not open</h1>
      <ErrorMessage error={error} />
      <button type="button" onClick={onRetry}>
        Try again
      </button>
    </main>
  )
}

function App() {
  const [session, setSession] = useState<PortalSession | null>(null)
  const [ended, setEnded] = useState<Problem | null>(null)
  const [failed, setFailed] = useState<unknown>(null)
  const [attempt, setAttempt] = useState(0)

  useEffect(() => whenSessionEnds(setEnded), [])
  useEffect(() => {
    setFailed(null)
    openSession(token, embedded).then(setSession, (err) => {
      const problem = problemOfError(err)
      // A refused link or session (401) has ended it already; a 403 (another site's request) is final too.
      if (problem.status === 401 || problem.status === 403) endSession(problem)
      else setFailed(err)
    })
  }, [attempt])

  // At its expiry the session ends: the page says so without waiting for a refused call.
  useEffect(() => {
    if (session === null) return
    const timer = setTimeout(
      () =>
        endSession({
          status: 401,
          code: 'unauthenticated',
          title: 'The portal session has expired',
          detail: 'the portal session has expired: ask your provider for a new portal link',
        }),
      Math.min(Math.max(Date.parse(session.expires_at) - Date.now(), 0), MAX_DELAY),
    )
    return () => clearTimeout(timer)
  }, [session])

  if (ended !== null)
    return (
      <Ended problem={ended} session={session}>
        <LiveRegion />
      </Ended>
    )
  if (failed !== null) return <OpenFailed error={failed} onRetry={() => setAttempt((n) => n + 1)} />
  if (session === null)
    return (
      <main id="main">
        <Loading what="your portal session" />
      </main>
    )
  return (
    <Shell session={session}>
      <LiveRegion />
    </Shell>
  )
}

// The shell's "Loading the portal…" goes: preact would draw beside it, outside any landmark.
const root = document.getElementById('app')!
root.replaceChildren()
render(<App />, root)

// The console's shell: sign-in, the navigation, and a screen per hash route (#/sub-accounts,
// #/sub-accounts/<id>, #/usage, #/events, #/webhooks, #/routes).
import 'uplot/dist/uPlot.min.css'
import './console.css'
import './screens.css'
import { Component, type ComponentChildren, render } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { ApiError, type Problem, session, whenKeyRefused } from './api.js'
import { ErrorMessage, LiveRegion } from './components.js'
import { EventsScreen } from './events.js'
import { RoutesScreen } from './routes.js'
import { SignIn } from './signin.js'
import { SubAccountScreen } from './subaccount.js'
import { SubAccountsScreen } from './subaccounts.js'
import { UsageScreen } from './usage.js'
import { WebhooksScreen } from './webhooks.js'

function currentRoute(): string {
  return location.hash.replace(/^#/, '') || '/sub-accounts'
}

const NAV = [
  ['/sub-accounts', 'Sub-accounts'],
  ['/usage', 'Usage'],
  ['/events', 'Audit log'],
  ['/webhooks', 'Webhooks'],
  ['/routes', 'Routes'],
] as const

/** Sub-account ids are UUIDs: anything else (`..` above all) never reaches an API path. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

function idOf(part: string): string | null {
  try {
    const id = decodeURIComponent(part)
    return UUID.test(id) ? id : null
  } catch {
    return null // a malformed %-escape in the address
  }
}

const NO_SUCH = new ApiError({
  status: 404,
  code: 'not_found',
  title: 'Not found',
  detail: 'The address does not name a sub-account.',
})

/** A screen that throws while drawing shows why, instead of leaving the page blank. */
class Boundary extends Component<{ children: ComponentChildren }, { error: unknown }> {
  override state = { error: null as unknown }
  override componentDidCatch(error: unknown) {
    this.setState({ error })
  }
  override render() {
    return this.state.error === null ? this.props.children : <ErrorMessage error={this.state.error} />
  }
}

function Screen({ route }: { route: string }) {
  const detail = /^\/sub-accounts\/([^/]+)$/.exec(route)
  if (detail !== null) {
    const id = idOf(detail[1]!)
    return id === null ? <ErrorMessage error={NO_SUCH} /> : <SubAccountScreen id={id} />
  }
  if (route === '/usage') return <UsageScreen />
  if (route === '/events') return <EventsScreen />
  if (route === '/webhooks') return <WebhooksScreen />
  if (route === '/routes') return <RoutesScreen />
  return <SubAccountsScreen />
}

function App() {
  const [signedIn, setSignedIn] = useState(session.key() !== null)
  const [refused, setRefused] = useState<Problem | null>(null)
  const [route, setRoute] = useState(currentRoute())
  const main = useRef<HTMLElement>(null)

  useEffect(() => {
    whenKeyRefused((problem) => {
      session.signOut()
      setRefused(problem)
      setSignedIn(false)
    })
    const onHash = () => {
      setRoute(currentRoute())
      // A new screen: move focus to its heading region, as a page load would.
      main.current?.focus()
    }
    addEventListener('hashchange', onHash)
    return () => removeEventListener('hashchange', onHash)
  }, [])

  if (!signedIn)
    return (
      <>
        <SignIn
          refused={refused}
          onSignedIn={() => {
            setRefused(null)
            setSignedIn(true)
          }}
        />
        <LiveRegion />
      </>
    )

  const section = `/${route.split('/')[1] ?? ''}`
  return (
    <>
      <button type="button" class="skip" onClick={() => main.current?.focus()}>
        Skip to content
      </button>
      <header class="top">
        <p class="brand">tenancy-gateway console</p>
        <nav aria-label="Sections">
          <ul>
            {NAV.map(([path, label]) => (
              <li key={path}>
                <a href={`#${path}`} aria-current={section === path ? 'page' : undefined}>
                  {label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <button
          type="button"
          class="signout"
          onClick={() => {
            session.signOut()
            setSignedIn(false)
          }}
        >
          Sign out
        </button>
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        <Boundary key={route}>
          <Screen route={route} />
        </Boundary>
      </main>
      <LiveRegion />
    </>
  )
}

render(<App />, document.getElementById('app')!)

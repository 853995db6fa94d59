// The console's shell: sign-in, the navigation, and a screen per hash route (#/sub-accounts,
// #/sub-accounts/<id>, #/sub-accounts/<id>/credits, #/plans, #/usage, #/requests?<filters>, #/events, #/webhooks, #/routes).
import 'uplot/dist/uPlot.min.css'
import './console.css'
import './screens.css'
import { Component, type ComponentChildren, render } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { ApiError, type Problem, session, whenKeyRefused } from './api.js'
import { ErrorMessage, LiveRegion } from './components.js'
import { CreditsScreen } from './credits.js'
import { EventsScreen } from './events.js'
import { isUuid } from './request-filters.js'
import { PlansScreen } from './plans.js'
import { RequestsScreen } from './requests.js'
import { RoutesScreen } from './routes.js'
import { SignIn } from './signin.js'
import { SubAccountScreen } from './subaccount.js'
import { SubAccountsScreen } from './subaccounts.js'
import { UsageScreen } from './usage.js'
import { WebhooksScreen } from './webhooks.js'

function currentRoute(): string {
  return location.hash.replace(/^#/, '') || '/sub-accounts'
}

/** A route's path and its query (after the first `?`: the Requests screen's filters). */
function partsOf(route: string): { path: string; search: string } {
  const at = route.indexOf('?')
  return at === -1 ? { path: route, search: '' } : { path: route.slice(0, at), search: route.slice(at + 1) }
}

const NAV = [
  ['/sub-accounts', 'Sub-accounts'],
  ['/plans', 'Plans'],
  ['/usage', 'Usage'],
  ['/requests', 'Requests'],
  ['/events', 'Audit log'],
  ['/webhooks', 'Webhooks'],
  ['/routes', 'Routes'],
] as const

/** Sub-account ids are UUIDs: anything else (`..` above all) never reaches an API path. */
function idOf(part: string): string | null {
  try {
    const id = decodeURIComponent(part)
    return isUuid(id) ? id : null
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

function Screen({ path, search }: { path: string; search: string }) {
  const detail = /^\/sub-accounts\/([^/]+)(\/credits)?$/.exec(path)
  if (detail !== null) {
    const id = idOf(detail[1]!)
    if (id === null) return <ErrorMessage error={NO_SUCH} />
    return detail[2] === undefined ? <SubAccountScreen id={id} /> : <CreditsScreen id={id} />
  }
  if (path === '/usage') return <UsageScreen />
  // The filters go to the API as query parameters only (requests.tsx), the ids checked first.
  if (path === '/requests') return <RequestsScreen search={search} />
  // The target id from the address goes to the API as a query parameter (encoded), never in a path.
  if (path === '/events') return <EventsScreen search={search} />
  if (path === '/webhooks') return <WebhooksScreen />
  if (path === '/routes') return <RoutesScreen />
  if (path === '/plans') return <PlansScreen />
  return <SubAccountsScreen />
}

function App() {
  const [signedIn, setSignedIn] = useState(session.key() !== null)
  const [refused, setRefused] = useState<Problem | null>(null)
  const [route, setRoute] = useState(currentRoute())
  const main = useRef<HTMLElement>(null)
  const shownPath = useRef(partsOf(route).path)

  useEffect(() => {
    whenKeyRefused((problem) => {
      session.signOut()
      setRefused(problem)
      setSignedIn(false)
    })
    const onHash = () => {
      const next = currentRoute()
      setRoute(next)
      // A new screen: move focus to its heading region, as a page load would. New filters on the
      // same screen leave focus where it is (on the form that set them), unless what had it is gone
      // (a link in the list), once the screen has drawn.
      const nextPath = partsOf(next).path
      if (nextPath !== shownPath.current) main.current?.focus()
      else
        setTimeout(() => {
          if (!main.current?.contains(document.activeElement)) main.current?.focus()
        })
      shownPath.current = nextPath
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

  const { path, search } = partsOf(route)
  const section = `/${path.split('/')[1] ?? ''}`
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
        <Boundary key={path}>
          <Screen path={path} search={search} />
        </Boundary>
      </main>
      <LiveRegion />
    </>
  )
}

render(<App />, document.getElementById('app')!)

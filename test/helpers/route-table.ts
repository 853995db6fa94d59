// The route table's refusals as tests check them (test/unit/routes.test.ts, route-meters.test.ts):
// a ConfigError whose one-line message names GATEWAY_CONFIG, the route and what is wrong.
import type { Test } from 'tap'
import { ConfigError } from '../../src/config.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'

export const UP = 'http://shipments:8080'

/** The ConfigError `run` throws; fails the test when it returns or throws something else. */
export function configError(t: Test, run: () => unknown, name: string): ConfigError | null {
  try {
    run()
  } catch (err) {
    t.type(err, ConfigError, `${name}: a ConfigError`)
    return err instanceof ConfigError ? err : null
  }
  t.fail(`${name}: accepted, expected a ConfigError`)
  return null
}

/** Asserts a refusal whose one-line message names GATEWAY_CONFIG, `where` and `mentions`. */
export function refuses(
  t: Test,
  doc: Record<string, unknown>,
  where: string,
  name: string,
  upstreamUrl?: string,
  mentions?: RegExp,
) {
  const err = configError(t, () => loadRouteTable(doc, upstreamUrl), name)
  if (err === null) return
  t.equal(err.variable, 'GATEWAY_CONFIG', `${name}: names the variable`)
  t.match(err.message, /GATEWAY_CONFIG/, `${name}: the message names GATEWAY_CONFIG`)
  t.ok(err.message.includes(where), `${name}: the message names ${where}: ${err.message}`)
  t.notMatch(err.message, /\n/, `${name}: one line`)
  if (mentions) t.match(err.message, mentions, `${name}: says what is wrong`)
}

/** A table whose second route (index 1, prefix /v1/x) is `route`. */
export const second = (route: Record<string, unknown>) => ({
  routes: [
    { prefix: '/v1/ok', upstream: UP },
    { prefix: '/v1/x', upstream: UP, ...route },
  ],
})
export const WHERE = 'routes[1] (/v1/x)'

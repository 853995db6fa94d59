// A spelling of a longer route's prefix that a folding upstream would serve as that route
// (proxy/prefix-shadow.ts): refused, never proxied under this route's weaker scopes.
import { routeNotFound } from '../../errors.js'
import type { StepFactory } from '../options.js'
import { pathOf } from '../../http/bad-paths.js'
import { prefixShadowCheck } from '../prefix-shadow.js'

export const prefixShadowStep: StepFactory = (route, { routes }) => {
  const shadowsLongerPrefix = prefixShadowCheck(route.prefix, routes)
  return {
    name: 'prefix shadow',
    check(request) {
      const path = pathOf(request.url)
      return shadowsLongerPrefix(path) ? routeNotFound(request.method, path) : undefined
    },
  }
}

// The router may fall back to a shorter prefix (a catch-all) for a path the gateway serves itself,
// with a method or depth it does not serve: that is still not a proxied path.
import { routeNotFound } from '../../errors.js'
import type { StepFactory } from '../options.js'
import { isReservedPath } from '../paths.js'
import { pathOf } from '../../http/bad-paths.js'

export const reservedPathStep: StepFactory = (_route, { consoleServed }) => ({
  name: 'reserved path',
  check(request) {
    const path = pathOf(request.url)
    return isReservedPath(path, consoleServed) ? routeNotFound(request.method, path) : undefined
  },
})

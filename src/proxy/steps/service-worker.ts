// A service worker's script is never fetched through the proxy (docs/api.md, Proxied requests). A
// browser marks every fetch of one, registration and update alike, with `Service-Worker: script`
// (Service Workers, §Update), which no page can set; refused before the key is asked for, on every
// route. A worker registered from a proxied page would control the gateway's origin, the console
// and the portal included, and read their credentials off every request.
import { ApiError } from '../../errors.js'
import type { StepFactory } from '../options.js'

const REFUSED =
  "a service worker's script is not served through the gateway: proxied pages share the gateway's origin with its console and portal"

export const serviceWorkerStep: StepFactory = () => ({
  name: 'service worker',
  check(request) {
    return request.headers['service-worker'] === undefined ? undefined : new ApiError('service_worker_refused', REFUSED)
  },
})

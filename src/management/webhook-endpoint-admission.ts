// Whether a parent may add a webhook endpoint, or move one to another URL (docs/api.md, Webhook
// endpoints): at most WEBHOOK_ENDPOINTS_MAX endpoints, and each URL once, so that one write cannot
// fan out to one host many times over. Checked inside the creating (or changing) transaction,
// under the parent's advisory lock.
import { ApiError } from '../errors.js'
import type { Tx } from '../store/db.js'
import { listLiveEndpointUrls, lockParentEndpoints } from '../store/webhook-endpoints.js'

/** WEBHOOK_ENDPOINTS_MAX when not set. */
export const DEFAULT_WEBHOOK_ENDPOINTS_MAX = 20

/**
 * The URL as a receiver sees it: WHATWG-parsed (host case, default port, dot segments and
 * percent-encoding made canonical) and without the fragment, which is never sent.
 */
export function deliveredUrl(raw: string): string {
  const url = new URL(raw)
  url.hash = ''
  return url.href
}

/**
 * Takes the parent's lock and refuses the new endpoint when the parent already has `max` of them
 * (`409 limit_reached`) or one, active or disabled, with the same URL (`409 url_conflict`).
 * Deleted endpoints count for neither. Must run in the transaction that then inserts the row.
 */
export async function admitWebhookEndpoint(tx: Tx, accountId: string, url: string, max: number): Promise<void> {
  await lockParentEndpoints(tx, accountId)
  const live = await listLiveEndpointUrls(tx, accountId)
  refuseTakenUrl(live, url)
  if (live.length >= max) {
    throw new ApiError(
      'limit_reached',
      `this parent already has ${live.length} webhook endpoints, the most WEBHOOK_ENDPOINTS_MAX (${max}) allows; delete one first`,
    )
  }
}

/**
 * Takes the parent's lock and refuses `url` for the endpoint `id` when another of the parent's
 * endpoints has it (`409 url_conflict`): the one-URL rule of creation, for a change of URL. The
 * number of endpoints does not change, so the cap is not checked.
 */
export async function admitUrlChange(tx: Tx, accountId: string, id: string, url: string): Promise<void> {
  await lockParentEndpoints(tx, accountId)
  const others = (await listLiveEndpointUrls(tx, accountId)).filter((endpoint) => endpoint.id !== id)
  refuseTakenUrl(others, url)
}

function refuseTakenUrl(live: { id: string; url: string }[], url: string): void {
  const wanted = deliveredUrl(url)
  const same = live.find((endpoint) => deliveredUrl(endpoint.url) === wanted)
  if (same !== undefined) {
    throw new ApiError(
      'url_conflict',
      `webhook endpoint ${same.id} already has this url; use it, or delete it before registering the url again`,
    )
  }
}

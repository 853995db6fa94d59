// What an operator may give as a parent account's portal origins (`cli -- accounts portal-origins`):
// the https origins that may embed its sub-account portal, checked by the portal's exchange against
// the page's ancestors (portal/exchange-routes.ts). The change and its event: events/account-list-changes.ts.

export const PORTAL_ORIGINS_MAX = 20

/**
 * What an origin may be, as the text given and as serialised: `https://`, a host of ASCII letters,
 * digits and hyphens in dot-separated labels (CSP's host-source grammar; an IDN as its `xn--`
 * form), an optional port, an optional trailing `/`. Nothing else: not `;`, `'`, a space or any
 * character the URL parser would pass or quietly drop (a tab, a newline), since the value is shown
 * to browsers as a policy's source.
 */
const STRICT_ORIGIN = /^https:\/\/[a-z0-9-]+(?:\.[a-z0-9-]+)*(?::[0-9]{1,5})?\/?$/i

/**
 * An https origin as a browser serialises it (`https://a.example`, `https://a.example:8443`), or
 * null when `text` is not one: no path, query, fragment, user, wildcard or other character.
 */
export function httpsOrigin(text: string): string | null {
  if (!STRICT_ORIGIN.test(text)) return null
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return null // a port past 65535
  }
  return STRICT_ORIGIN.test(url.origin) ? url.origin : null
}

/** The valid origins of a stored list (one written before the strict check may hold others); null for none. */
export function storedPortalOrigins(list: readonly string[] | null): string[] | null {
  if (list === null) return null
  const origins = list.filter((origin) => httpsOrigin(origin) === origin)
  return origins.length === 0 ? null : origins
}

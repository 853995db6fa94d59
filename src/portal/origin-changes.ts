// What an operator may give as a parent account's portal origins (`cli -- accounts portal-origins`):
// the https origins that may embed its sub-account portal, the `frame-ancestors` of the portal's
// page (portal/plugin.ts). The change and its event: events/account-list-changes.ts.

export const PORTAL_ORIGINS_MAX = 20

/**
 * An https origin as a browser serialises it (`https://a.example`, `https://a.example:8443`), or
 * null when `text` is not one: no path, query, fragment, user or wildcard, since it goes into a
 * Content-Security-Policy as it is.
 */
export function httpsOrigin(text: string): string | null {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return null
  }
  if (url.protocol !== 'https:' || url.username !== '' || url.password !== '') return null
  if (url.search !== '' || url.hash !== '' || (url.pathname !== '/' && url.pathname !== '')) return null
  if (text.includes('*') || !/^https:\/\/[^/]+\/?$/i.test(text)) return null
  return url.origin
}

// The query as the gateway's own routes read it (management, portal): find-my-way's parser, but a
// parameter with no value (`?cursor=`, a template's `?type=&since=`) is not sent, as RFC 6749
// §3.2 rules for OAuth's. One sent twice stays a list, refused; proxied queries go as sent.
import querystring from 'fast-querystring'

export function parseQueryString(text: string): Record<string, unknown> {
  if (text.length === 0) return {}
  const parsed = querystring.parse(text) as Record<string, unknown>
  for (const name in parsed) if (parsed[name] === '') delete parsed[name]
  return parsed
}

// The query string as the gateway's own routes read it (management, portal): find-my-way's own
// parser (fast-querystring), but a parameter sent with no value is taken as not sent. A client
// that builds `?cursor=` for its first page, or fills a filter template (`?type=&since=`), means
// no cursor and no filter; RFC 6749 §3.2 says the same of the token endpoint's parameters. A
// parameter sent twice stays a list, refused as before. Proxied requests go upstream as sent.
import querystring from 'fast-querystring'

export function parseQueryString(text: string): Record<string, unknown> {
  if (text.length === 0) return {}
  const parsed = querystring.parse(text) as Record<string, unknown>
  for (const name in parsed) if (parsed[name] === '') delete parsed[name]
  return parsed
}

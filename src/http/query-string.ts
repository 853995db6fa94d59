// The query string as every route reads it: find-my-way's own parser (fast-querystring), but a
// parameter sent with no value is taken as not sent. A client that builds `?cursor=` for its first
// page, or fills a filter template (`?type=&since=`), means no cursor and no filter; RFC 6749
// §3.1 says the same of OAuth's parameters. A parameter sent twice stays a list, refused as before.
import querystring from 'fast-querystring'

export function parseQueryString(text: string): Record<string, unknown> {
  if (text.length === 0) return {}
  const parsed = querystring.parse(text) as Record<string, unknown>
  for (const name in parsed) if (parsed[name] === '') delete parsed[name]
  return parsed
}

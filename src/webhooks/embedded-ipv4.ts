// IPv4 addresses carried inside IPv6 ones that reach them
// (docs/decisions/0127-webhook-urls-https-no-credentials-public-addresses.md): IPv4-mapped
// ::ffff:0:0/96 (RFC 4291: a dual-stack socket connects to the IPv4 address), NAT64's well-known
// prefix 64:ff9b::/96 (RFC 6052: the last 32 bits) and 6to4's 2002::/16 (RFC 3056: bits 16 to 47).
// A dual-stack socket, a gateway behind NAT64 or a 6to4 relay would deliver to the IPv4 address
// inside, so it is judged as that address. The other IPv6 blocks that carry an IPv4 address (SIIT's
// ::ffff:0:0:0/96, local-use NAT64 64:ff9b:1::/48) lead where the deployment's own translator says
// and are refused whole (special-purpose-addresses.ts).
import { isIP } from 'node:net'

/** The eight 16-bit groups of an IPv6 literal (a zone dropped, a dotted IPv4 tail folded in). */
export function ipv6Groups(address: string): number[] | null {
  const bare = address.replace(/%.*$/, '')
  if (isIP(bare) !== 6) return null
  const [head, tail] = bare.includes('::') ? bare.split('::') : [bare, undefined]
  const part = (text: string | undefined) =>
    text === undefined || text === ''
      ? []
      : text.split(':').flatMap((group) => {
          if (!group.includes('.')) return [Number.parseInt(group, 16)]
          const [a, b, c, d] = group.split('.').map(Number) as [number, number, number, number]
          return [(a << 8) | b, (c << 8) | d]
        })
  const front = part(head)
  const back = part(tail)
  const zeros = tail === undefined ? [] : new Array<number>(8 - front.length - back.length).fill(0)
  const groups = [...front, ...zeros, ...back]
  return groups.length === 8 ? groups : null
}

const dotted = (high: number, low: number) => `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`

export type EmbeddingKind = 'IPv4-mapped' | 'NAT64' | '6to4'

/** The IPv4 address an IPv4-mapped, NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address reaches, or null. */
export function embeddedIpv4(address: string): { ipv4: string; kind: EmbeddingKind } | null {
  const g = ipv6Groups(address)
  if (g === null) return null
  if (g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff) {
    return { ipv4: dotted(g[6]!, g[7]!), kind: 'IPv4-mapped' }
  }
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0) {
    return { ipv4: dotted(g[6]!, g[7]!), kind: 'NAT64' }
  }
  if (g[0] === 0x2002) return { ipv4: dotted(g[1]!, g[2]!), kind: '6to4' }
  return null
}

// The addresses a webhook may never be sent to
// (docs/decisions/0128-every-special-purpose-block-that-is-not-globally.md), in one place: every block of
// IANA's IPv4 and IPv6 special-purpose address registries (RFC 6890 and the RFCs that updated them) that is
// not globally reachable, plus the blocks outside those registries that no public receiver lives in
// (multicast, the deprecated site-local and IPv4-compatible IPv6 blocks) and the cloud hosts' own addresses.
// A block the registry marks globally reachable (the AS112 and AMT blocks, the anycast 192.0.0.9 and
// 192.0.0.10) is refused anyway when it sits inside a larger block that is not: we refuse whole blocks,
// never carve exceptions out of them.
//
// The blocks that carry an IPv4 address to which a network delivers (IPv4-mapped, NAT64's
// 64:ff9b::/96, 6to4) are not here: they are judged as the IPv4 address inside (embedded-ipv4.ts).
import { BlockList, isIP } from 'node:net'

export type AddressFamily = 'ipv4' | 'ipv6'

/** One block: where it is, the RFC that set it aside, and what it is, as a refusal says it. */
export interface SpecialPurposeBlock {
  readonly network: string
  readonly prefix: number
  readonly family: AddressFamily
  readonly rfc: string
  /** Completes "<address> is …": an article and a noun. */
  readonly what: string
}

const v4 = (network: string, prefix: number, rfc: string, what: string): SpecialPurposeBlock => ({
  network,
  prefix,
  family: 'ipv4',
  rfc,
  what,
})
const v6 = (network: string, prefix: number, rfc: string, what: string): SpecialPurposeBlock => ({
  network,
  prefix,
  family: 'ipv6',
  rfc,
  what,
})

/**
 * The blocks, a narrower block before the wider one that holds it so that a refusal names the
 * narrower (2001:db8::1 is "a documentation address", not "an IETF protocol assignment").
 */
export const SPECIAL_PURPOSE_BLOCKS: readonly SpecialPurposeBlock[] = [
  // The cloud metadata services (AWS, GCP, Azure, OpenStack; AWS's IPv6 one), inside link-local and
  // unique local, named first so that a refusal says what they are.
  v4('169.254.169.254', 32, 'cloud', 'a cloud metadata address'),
  v6('fd00:ec2::254', 128, 'cloud', 'a cloud metadata address'),

  // IPv4 special-purpose registry.
  v4('0.0.0.0', 8, 'RFC 791', 'an unspecified ("this network") address'),
  v4('10.0.0.0', 8, 'RFC 1918', 'a private address'),
  v4('100.64.0.0', 10, 'RFC 6598', 'a shared (CGNAT) address'),
  v4('127.0.0.0', 8, 'RFC 1122', 'a loopback address'),
  v4('169.254.0.0', 16, 'RFC 3927', 'a link-local address'),
  v4('172.16.0.0', 12, 'RFC 1918', 'a private address'),
  // Holds the IPv4 service continuity prefix 192.0.0.0/29 (RFC 7335), the dummy address 192.0.0.8
  // (RFC 7600), the NAT64 discovery addresses 192.0.0.170-171 (RFC 8880) and Oracle Cloud's
  // metadata service 192.0.0.192.
  v4('192.0.0.0', 24, 'RFC 6890', 'an IETF protocol assignment address'),
  v4('192.0.2.0', 24, 'RFC 5737', 'a documentation (TEST-NET-1) address'),
  v4('192.88.99.0', 24, 'RFC 7526', 'a deprecated 6to4 relay anycast address'),
  v4('192.168.0.0', 16, 'RFC 1918', 'a private address'),
  v4('198.18.0.0', 15, 'RFC 2544', 'a benchmarking address'),
  v4('198.51.100.0', 24, 'RFC 5737', 'a documentation (TEST-NET-2) address'),
  v4('203.0.113.0', 24, 'RFC 5737', 'a documentation (TEST-NET-3) address'),
  // Not in the special-purpose registry: multicast has a registry of its own; no receiver is there.
  v4('224.0.0.0', 4, 'RFC 5771', 'a multicast address'),
  v4('255.255.255.255', 32, 'RFC 919', 'the limited broadcast address'),
  v4('240.0.0.0', 4, 'RFC 1112', 'a reserved address'),
  // Azure's host address (DNS, DHCP, the VM agent, health probes): reachable from every Azure VM
  // and not a receiver any parent owns.
  v4('168.63.129.16', 32, 'Azure', 'the Azure host address'),

  // IPv6 special-purpose registry.
  v6('::', 128, 'RFC 4291', 'the unspecified address'),
  v6('::1', 128, 'RFC 4291', 'a loopback address'),
  // The deprecated IPv4-compatible addresses (::127.0.0.1): not judged as the IPv4 inside, since
  // nothing delivers to them any more.
  v6('::', 96, 'RFC 4291', 'an IPv4-compatible address'),
  // SIIT's IPv4-translated addresses (::ffff:0:a.b.c.d): only a local stateless translator makes
  // sense of them, so where they lead is the deployment's choice, like local-use NAT64.
  v6('::ffff:0:0:0', 96, 'RFC 7915', 'an IPv4-translated (SIIT) address'),
  // Local-use NAT64: its translator and the IPv4 addresses it reaches are the deployment's own.
  v6('64:ff9b:1::', 48, 'RFC 8215', 'a local-use NAT64 address'),
  v6('100::', 64, 'RFC 6666', 'a discard-only address'),
  // Teredo: a tunnel through a relay, to an address (obfuscated in the last 32 bits) behind a NAT.
  v6('2001::', 32, 'RFC 4380', 'a Teredo address'),
  v6('2001:2::', 48, 'RFC 5180', 'a benchmarking address'),
  v6('2001:10::', 28, 'RFC 4843', 'a deprecated ORCHID address'),
  v6('2001:20::', 28, 'RFC 7343', 'an ORCHIDv2 address'),
  v6('2001::', 23, 'RFC 2928', 'an IETF protocol assignment address'),
  v6('2001:db8::', 32, 'RFC 3849', 'a documentation address'),
  v6('3fff::', 20, 'RFC 9637', 'a documentation address'),
  v6('5f00::', 16, 'RFC 9602', 'a segment routing (SRv6 SID) address'),
  v6('fc00::', 7, 'RFC 4193', 'a private (unique local) address'),
  v6('fe80::', 10, 'RFC 4291', 'a link-local address'),
  // Site-local, deprecated but still routed inside some networks as their private range.
  v6('fec0::', 10, 'RFC 3879', 'a site-local address'),
  v6('ff00::', 8, 'RFC 4291', 'a multicast address'),
]

/** Each family's blocks in one BlockList, and the blocks one by one to name the one matched. */
const byFamily = (family: AddressFamily) => {
  const blocks = SPECIAL_PURPOSE_BLOCKS.filter((block) => block.family === family)
  const all = new BlockList()
  const each = blocks.map((block) => {
    const list = new BlockList()
    list.addSubnet(block.network, block.prefix, family)
    all.addSubnet(block.network, block.prefix, family)
    return { block, list }
  })
  return { all, each }
}
const LISTS = { ipv4: byFamily('ipv4'), ipv6: byFamily('ipv6') }

/**
 * The special-purpose block `address` (an IP literal) is in, or null. The address is matched only
 * against its own family's blocks: an IPv4-mapped address is not matched here (BlockList would
 * match it against IPv4 rules of the same list); the caller judges it as the IPv4 address inside.
 */
export function specialPurposeBlock(address: string): SpecialPurposeBlock | null {
  const family = isIP(address)
  if (family === 0) return null
  const type: AddressFamily = family === 6 ? 'ipv6' : 'ipv4'
  const { all, each } = LISTS[type]
  if (!all.check(address, type)) return null
  return each.find(({ list }) => list.check(address, type))?.block ?? null
}

// IP allow-lists (docs/api.md, Key policies and IP allow-lists): CIDRs checked with node's own
// BlockList, compiled once per list (a key's or a policy's record is cached; so is its BlockList),
// and each address's answer remembered with it.
import { BlockList, isIP } from 'node:net'

/** What is wrong with an allow-list entry (`203.0.113.0/24`, `2001:db8::/48`, or one address); null when nothing. */
export function cidrProblem(entry: string): string | null {
  const slash = entry.indexOf('/')
  const address = slash === -1 ? entry : entry.slice(0, slash)
  // isIP takes a zone (`fe80::1%eth0`), which a match would ignore: an entry means every interface.
  if (address.includes('%')) return 'has a zone (%…): write the address without it'
  const version = isIP(address)
  if (version === 0) return 'is not an IPv4 or IPv6 address or CIDR (203.0.113.0/24, 2001:db8::/48)'
  if (slash === -1) return null
  const prefix = entry.slice(slash + 1)
  const max = version === 4 ? 32 : 128
  if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > max) return `has a prefix length that is not 0 to ${max}`
  if (version === 6 && Number(prefix) < 96 && coversMappedIpv4(address, Number(prefix)))
    return 'covers ::ffff:0:0/96, so every IPv4 client too: list IPv4 clients as IPv4 (0.0.0.0/0 for all)'
  return null
}

/**
 * Whether an IPv6 subnet holds the IPv4-mapped range: BlockList checks an IPv4 client against it
 * as ::ffff:a.b.c.d, so `::/0`, meant as "any IPv6 client", would let every IPv4 one in as well.
 */
function coversMappedIpv4(address: string, prefix: number): boolean {
  const subnet = new BlockList()
  subnet.addSubnet(address, prefix, 'ipv6')
  return subnet.check('::ffff:0.0.0.0', 'ipv6')
}

/** A list's BlockList, and the answers it gave lately: a check costs about 2 µs, a Map lookup 50 ns. */
interface CompiledList {
  readonly blocks: BlockList
  readonly answers: Map<string, boolean>
}

/** Addresses whose answer a list remembers; past it, it forgets them all and starts again. */
const REMEMBERED_ADDRESSES = 1_024

const compiled = new WeakMap<readonly string[], CompiledList>()

function compiledList(list: readonly string[]): CompiledList {
  let entry = compiled.get(list)
  if (entry === undefined) {
    const blocks = new BlockList()
    for (const item of list) {
      const [address, prefix] = item.split('/') as [string, string | undefined]
      const type = isIP(address) === 4 ? 'ipv4' : 'ipv6'
      if (prefix === undefined) blocks.addAddress(address, type)
      else blocks.addSubnet(address, Number(prefix), type)
    }
    entry = { blocks, answers: new Map() }
    compiled.set(list, entry)
  }
  return entry
}

const MAPPED_IPV4 = /^::ffff:(\d{1,3}(\.\d{1,3}){3})$/i

/** Whether `ip` (as fastify gives it: IPv4, IPv6, or IPv4-mapped IPv6) is within `list`. */
export function allowsAddress(list: readonly string[], ip: string): boolean {
  const { blocks, answers } = compiledList(list)
  const known = answers.get(ip)
  if (known !== undefined) return known
  const mapped = MAPPED_IPV4.exec(ip)
  const address = mapped === null ? ip : mapped[1]!
  const version = isIP(address)
  const allowed = version !== 0 && blocks.check(address, version === 4 ? 'ipv4' : 'ipv6')
  if (answers.size >= REMEMBERED_ADDRESSES) answers.clear()
  answers.set(ip, allowed)
  return allowed
}

// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// intscope host-INT agent: the per-packet half, in the kernel.
//
// Three BTF tracepoints (tp_btf: raw tracepoints, no kprobes or trampolines) see every packet
// of the agent's network namespace where the kernel itself marks its passage:
//   netif_receive_skb   a packet arrives on an interface (the hop's ingress timestamp);
//   net_dev_start_xmit  a packet leaves an interface, after the qdisc (the egress timestamp:
//                       queueing in the qdisc is part of the hop latency, as a switch's egress
//                       timestamp is taken after its traffic manager);
//   kfree_skb           the kernel drops a packet, with its drop reason.
// The ingress timestamp travels from the first to the second in a table slotted by the skb's
// address (the same sk_buff crosses a Linux router or bridge), checked against the packet's
// IP identification so that a recycled address is not taken for the same packet.
//
// SD-Fabric's smart filters run here (shared/spec/sd-fabric-int.txt, "Smart filters and
// triggers"): one flow report per 5-tuple per interval, at once when the ports change or the
// hop latency moves by minFlowHopLatencyChangeNs (a power of two); one drop report per
// 5-tuple per interval; every packet of a queue whose latency is at or above the queue report
// trigger, and the first below the reset threshold after it (userspace keeps the quota).
// Only what passes reaches userspace, through the ring buffer; every packet seen is counted
// once under the outcome it had (enum counter).
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "flow_filter.h"

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
// Bytes of the packet, from its IP header, carried in an event (and so in a report).
#define CAPTURE 128
// Longest believable residence: an older ingress record is a recycled skb address.
#define MAX_RESIDENCE_NS 4000000000ULL

// Settings, written by the loader before the programs load (constant-folded by the verifier).
// The network namespaces watched (their inode numbers); a node of its own each, numbered by
// its place here. One agent may watch several (a lab on one machine): each tracepoint then
// runs one program per packet, not one per namespace.
#define MAX_NODES 32
const volatile __u32 node_count = 0;
const volatile __u32 netns_inums[MAX_NODES] = {};
const volatile __u32 watch_all = 0;          // every IP packet is watched
const volatile __u32 queue_trigger_ns = 0;   // 0: no queue reports
const volatile __u32 queue_reset_ns = 0;
const volatile __u32 report_port = 32766;    // report traffic is never watched
const volatile __u32 drops_all = 0;          // drop reports for unwatched packets too
// Up to WATCH_FAST watched prefixes, checked inline (an LPM trie lookup costs more than the
// rest of the program): per prefix, its address then its mask, 16 bytes each, IPv4 mapped.
// More prefixes than that go to the `watch` trie instead (watch_count = 0xff).
#define WATCH_FAST 16
const volatile __u32 watch_count = 0;
const volatile __u8 watch_prefixes[WATCH_FAST * 32] = {};

// Every packet sent on a watched interface (C_TX) or delivered to this host (C_LOCAL) ends in
// exactly one of C_NOT_IP, C_UNWATCHED, C_REPORTS, C_FILTERED, C_EVENTS, C_RING_FULL; every
// drop (C_DROPS) in exactly one of the C_DROP_* outcomes.
enum counter {
	C_RX = 0,        // packets received on a watched interface
	C_TX,            // packets sent on a watched interface
	C_LOCAL,         // IP packets (not reports) delivered to this host (their postcard is sent there)
	C_NOT_IP,        // seen, not IPv4/IPv6 (or headers unreadable)
	C_UNWATCHED,     // seen, on no watchlist
	C_REPORTS,       // seen, report traffic (never watched)
	C_FILTERED,      // seen, held back by the smart filters
	C_EVENTS,        // seen, sent to userspace
	C_RING_FULL,     // seen, to be sent, the ring buffer was full
	C_NO_INGRESS,    // sent packets with no ingress record (originated on this host)
	C_DROPS,         // packets the kernel dropped in this namespace
	C_DROP_EVENTS,   // ... sent to userspace
	C_DROP_FILTERED, // ... held back (one per 5-tuple per interval)
	C_DROP_UNWATCHED,// ... on no watchlist
	C_DROP_NOT_IP,   // ... not IP
	C_DROP_RING_FULL,// ... to be sent, the ring buffer was full
	C_INGRESS_STALE, // ingress records refused at egress (another packet, or too old)
	C_MAX,
};

enum kind { K_FLOW = 1, K_LOCAL = 2, K_DROP = 3 };

#define F_INGRESS 1      // ingress_if known
#define F_INGRESS_TS 2   // ingress_ns known
#define F_QUEUE 4        // qlen / backlog read from the root qdisc
#define F_CONGESTED 8    // latency at or above the queue trigger
#define F_EGRESS_DROP 16 // dropped on the egress side (qdisc, tc egress): dev is the egress
#define F_FLOW_DUE 32    // the flow filter let this packet's flow report through

// What userspace receives (little-endian host layout; crates/agent/src/event.rs reads it).
struct event {
	__u8 kind;
	__u8 flags;
	__u16 caplen;        // bytes of pkt that are the packet's
	__u32 drop_reason;   // the kernel's enum skb_drop_reason
	__u32 ingress_if;
	__u32 egress_if;
	__u64 ingress_ns;    // CLOCK_MONOTONIC
	__u64 egress_ns;     // CLOCK_MONOTONIC (drops: when dropped)
	__u32 qlen;          // packets in the egress device's root qdisc
	__u32 backlog;       // bytes in it
	__u32 queue_id;      // the skb's transmit queue
	__u32 pkt_len;       // skb->len
	__u16 l3_proto;      // ETH_P_IP / ETH_P_IPV6
	__u16 node;          // the namespace's index in netns_inums
	__u32 pad2;
	__u8 pkt[CAPTURE];   // from the IP header on
};

struct lpm_key {
	__u32 prefixlen;
	__u8 addr[16];       // IPv4 as ::ffff:a.b.c.d
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// The interfaces this agent watches: per namespace (by its index), a bit per interface index
// below IFACE_BITS, tested inline; interfaces numbered higher (a host that created thousands
// of veths) are looked up in `ifaces` instead: the programs run on every packet of the
// machine, and a hash lookup is a helper call and a hash of the key where a bit test is two
// loads.
#define IFACE_BITS 4096
struct iface_bits {
	__u64 w[IFACE_BITS / 64];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_NODES);
	__type(key, __u32);
	__type(value, struct iface_bits);
} iface_bits SEC(".maps");

struct iface_key {
	__u32 netns;
	__u32 ifindex;
};

// (namespace, ifindex) -> 1: the watched interfaces numbered IFACE_BITS or higher.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct iface_key);
	__type(value, __u32);
} ifaces SEC(".maps");

// This host's addresses, IPv4 and IPv6 apart: a packet to one is delivered here. One array
// value per namespace the loader rewrites as they change, compared inline (a hash lookup per
// received packet costs more); an IPv4 packet is compared with the IPv4 addresses alone, a
// word each, not with every address of the namespace (its IPv6 link-local ones included).
#define LOCAL_ADDRS 32
struct local_addrs {
	__u32 count4;
	__u32 count6;
	__u32 addr4[LOCAL_ADDRS];        // network order
	__u64 addr6[LOCAL_ADDRS][2];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_NODES);
	__type(key, __u32);
	__type(value, struct local_addrs);
} local_addrs SEC(".maps");

// Whether `addr` (IPv4 mapped when `v4`) is one of namespace `node`'s addresses.
static __always_inline int is_local(__u32 node, const __u8 *addr, int v4)
{
	__u32 index = node - 1;
	struct local_addrs *l = bpf_map_lookup_elem(&local_addrs, &index);
	if (!l)
		return 0;
	if (v4) {
		__u32 a;
		__builtin_memcpy(&a, addr + 12, 4);
		for (int i = 0; i < LOCAL_ADDRS; i++) {
			if (i >= l->count4)
				break;
			if (l->addr4[i] == a)
				return 1;
		}
		return 0;
	}
	__u64 a0, a1;
	__builtin_memcpy(&a0, addr, 8);
	__builtin_memcpy(&a1, addr + 8, 8);
	for (int i = 0; i < LOCAL_ADDRS; i++) {
		if (i >= l->count6)
			break;
		if (l->addr6[i][0] == a0 && l->addr6[i][1] == a1)
			return 1;
	}
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__type(key, struct lpm_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} watch SEC(".maps");

// Ingress records are a direct-mapped table (an array map, a slot per hash, the newest entry
// wins a collision), as the flow filter's last reports are (flow_filter.h): a lookup is an
// address computation, where a hash map's update, lookup and delete cost more than the rest of
// the program. A collision costs a missing ingress time (the report leaves the hop latency out).
#define INGRESS_SLOTS 65536

struct ingress_slot {
	__u64 skb;           // the sk_buff's address: the slot's owner
	__u64 at;
	__u32 ifindex;
	__u32 ip_id;         // IPv4 identification / IPv6 payload length and next header
	__u32 node;          // the namespace it came into (index + 1)
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INGRESS_SLOTS);
	__type(key, __u32);
	__type(value, struct ingress_slot);
} ingress_at SEC(".maps");

// One word of scratch per CPU: a pointer written to a map and read back is a plain number to
// the verifier, which forbids hashing the pointer itself.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} scratch SEC(".maps");

// A packet's identity across the host: its sk_buff's address.
static __always_inline __u64 skb_id(const struct sk_buff *skb)
{
	__u32 zero = 0;
	volatile __u64 *v = bpf_map_lookup_elem(&scratch, &zero);
	if (!v)
		return 0;
	*v = (__u64)skb;
	return *v;
}

static __always_inline __u32 skb_slot(__u64 skb)
{
	return mix(skb) & (INGRESS_SLOTS - 1);
}

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct flow_key);
	__type(value, __u64);
} drops SEC(".maps");

// (egress ifindex << 16 | queue) -> 1 while its latency is at or above the trigger.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} congested SEC(".maps");

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
}

// The node (namespace index + 1) of a watched device, 0 for any other. Every pointer here is a
// BTF pointer the tracepoint hands over, read with plain loads (the verifier makes them
// fault-safe): a packet of another namespace costs a few loads and compares, no helper call.
static __always_inline __u32 ours(const struct net_device *dev)
{
	if (!dev)
		return 0;
	__u32 inum = dev->nd_net.net->ns.inum;
	__u32 node = 0;
	for (int i = 0; i < MAX_NODES; i++) {
		if (i >= node_count)
			break;
		if (netns_inums[i] == inum) {
			node = i + 1;
			break;
		}
	}
	if (!node)
		return 0;
	__u32 ifindex = dev->ifindex;
	if (ifindex < IFACE_BITS) {
		__u32 index = node - 1;
		struct iface_bits *b = bpf_map_lookup_elem(&iface_bits, &index);
		return b && ((b->w[ifindex / 64] >> (ifindex % 64)) & 1) ? node : 0;
	}
	struct iface_key k = { .netns = inum, .ifindex = ifindex };
	return bpf_map_lookup_elem(&ifaces, &k) ? node : 0;
}

struct parsed {
	struct flow_key key;
	__u32 ip_id;
	__u8 ttl;
};

// Bytes read at once from the IP header: an IPv6 header and the ports after it, an IPv4 header
// without options and the ports after it. One read per packet: each helper call costs as much
// as the rest of the parsing.
#define HEAD 44

// Reads the IP and L4 headers at `l3` into `p`. 0 when it is no IPv4/IPv6 packet.
static __always_inline int parse(const void *l3, __u16 proto, struct parsed *p)
{
	// Aligned, so that the addresses are copied a word at a time (see struct flow_key).
	__u8 h[HEAD] __attribute__((aligned(8)));
	if (bpf_probe_read_kernel(h, sizeof(h), l3))
		return 0;
	__builtin_memset(&p->key, 0, sizeof(p->key));
	__u32 l4;
	if (proto == ETH_P_IP) {
		if ((h[0] >> 4) != 4)
			return 0;
		l4 = (h[0] & 0xf) * 4;
		p->key.src[10] = 0xff; p->key.src[11] = 0xff;
		p->key.dst[10] = 0xff; p->key.dst[11] = 0xff;
		__builtin_memcpy(&p->key.src[12], &h[12], 4);
		__builtin_memcpy(&p->key.dst[12], &h[16], 4);
		p->key.proto = h[9];
		p->ip_id = ((__u32)h[4] << 8) | h[5];
		p->ttl = h[8];
		// A later fragment has no L4 header.
		if (((h[6] & 0x1f) | h[7]) != 0)
			return 1;
	} else if (proto == ETH_P_IPV6) {
		if ((h[0] >> 4) != 6)
			return 0;
		l4 = 40;
		__builtin_memcpy(p->key.src, &h[8], 16);
		__builtin_memcpy(p->key.dst, &h[24], 16);
		p->key.proto = h[6];
		p->ip_id = ((__u32)h[4] << 24) | ((__u32)h[5] << 16) | h[6];
		p->ttl = h[7];
	} else {
		return 0;
	}
	if (p->key.proto == IPPROTO_TCP || p->key.proto == IPPROTO_UDP) {
		__u8 ports[4];
		if (l4 == 20) {
			__builtin_memcpy(ports, &h[20], 4);
		} else if (l4 == 40) {
			__builtin_memcpy(ports, &h[40], 4);
		} else if (l4 < 20 || l4 > 60 || bpf_probe_read_kernel(ports, 4, l3 + l4)) {
			// IPv4 options: the ports lie past the first read.
			return 1;
		}
		p->key.sport = ((__u16)ports[0] << 8) | ports[1];
		p->key.dport = ((__u16)ports[2] << 8) | ports[3];
	}
	return 1;
}

static __always_inline int watched(const struct flow_key *k)
{
	if (k->proto == IPPROTO_UDP && (k->dport == report_port || k->sport == report_port))
		return -1;
	if (watch_all)
		return 1;
	if (watch_count <= WATCH_FAST) {
		__u64 s0, s1, d0, d1;
		__builtin_memcpy(&s0, k->src, 8);
		__builtin_memcpy(&s1, &k->src[8], 8);
		__builtin_memcpy(&d0, k->dst, 8);
		__builtin_memcpy(&d1, &k->dst[8], 8);
		for (int i = 0; i < WATCH_FAST; i++) {
			if (i >= watch_count)
				break;
			const volatile __u64 *p = (const volatile __u64 *)&watch_prefixes[i * 32];
			__u64 n0 = p[0], n1 = p[1], m0 = p[2], m1 = p[3];
			if (((s0 & m0) == n0 && (s1 & m1) == n1) || ((d0 & m0) == n0 && (d1 & m1) == n1))
				return 1;
		}
		return 0;
	}
	struct lpm_key q = { .prefixlen = 128 };
	__builtin_memcpy(q.addr, k->src, 16);
	if (bpf_map_lookup_elem(&watch, &q))
		return 1;
	__builtin_memcpy(q.addr, k->dst, 16);
	return bpf_map_lookup_elem(&watch, &q) != 0;
}

// The IP header of an skb: its network header once set, else its data (at receive the MAC
// header has been pulled and the network header is not yet reset).
static __always_inline const void *l3_of(const struct sk_buff *skb, int at_receive)
{
	if (at_receive)
		return skb->data;
	__u16 nh = skb->network_header;
	if (nh == 0 || nh == 0xffff)
		return skb->data;
	return skb->head + nh;
}

// The ingress record of `skb` (cleared: read once), if it is this packet's and young enough.
static __always_inline int take_ingress(__u64 skb, __u32 node, __u32 ip_id, __u64 now,
					__u32 *ifindex, __u64 *at)
{
	__u32 i = skb_slot(skb);
	struct ingress_slot *r = bpf_map_lookup_elem(&ingress_at, &i);
	if (!r || r->skb != skb || r->node != node)
		return 0;
	r->skb = 0;
	if (r->ip_id != ip_id || now - r->at >= MAX_RESIDENCE_NS) {
		count(C_INGRESS_STALE);
		return 0;
	}
	*ifindex = r->ifindex;
	*at = r->at;
	return 1;
}

// Queue reports: `1` while the latency is at or above the trigger, and for the first packet
// under the reset threshold after it (so userspace refills the quota); `0` otherwise.
static __always_inline int queue_due(__u32 node, __u32 out_if, __u32 queue, __u32 latency,
				     __u8 *flags)
{
	if (!queue_trigger_ns)
		return 0;
	__u64 q = ((__u64)node << 48) | ((__u64)out_if << 16) | (queue & 0xffff);
	__u32 *on = bpf_map_lookup_elem(&congested, &q);
	if (latency >= queue_trigger_ns) {
		*flags |= F_CONGESTED;
		if (!on) {
			__u32 one = 1;
			bpf_map_update_elem(&congested, &q, &one, BPF_ANY);
		}
		return 1;
	}
	if (on && latency < queue_reset_ns) {
		bpf_map_delete_elem(&congested, &q);
		return 1;
	}
	return 0;
}

// What an event says besides the packet (a BPF function takes at most five arguments).
struct emit_args {
	__u64 in_ns;
	__u64 out_ns;
	const void *l3;
	__u32 node;
	__u32 in_if;
	__u32 out_if;
	__u32 reason;
	__u16 proto;
	__u8 kind;
	__u8 flags;
};

// A function of its own, not inlined: most packets are filtered, and the event's code kept
// out of the programs' common path leaves it shorter in the instruction cache.
static __noinline int emit_event(const struct emit_args *a, const struct sk_buff *skb,
				 const struct net_device *dev)
{
	__u32 node = a->node, in_if = a->in_if, out_if = a->out_if, reason = a->reason;
	__u64 in_ns = a->in_ns, out_ns = a->out_ns;
	const void *l3 = a->l3;
	__u16 proto = a->proto;
	__u8 kind = a->kind, flags = a->flags;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->node = node - 1;
	e->kind = kind;
	e->drop_reason = reason;
	e->ingress_if = in_if;
	e->egress_if = out_if;
	e->ingress_ns = in_ns;
	e->egress_ns = out_ns;
	e->qlen = 0;
	e->backlog = 0;
	e->pad2 = 0;
	e->queue_id = skb->queue_mapping;
	e->l3_proto = proto;
	__u32 len = skb->len;
	e->pkt_len = len;
	if (kind == K_FLOW && dev) {
		struct Qdisc *q = dev->qdisc;
		if (q) {
			e->qlen = q->q.qlen;
			e->backlog = q->qstats.backlog;
			flags |= F_QUEUE;
		}
	}
	// The linear part holds the headers; the capture stops at the packet's end.
	__u32 linear = len - skb->data_len;
	unsigned char *data = skb->data;
	__u32 before = (const unsigned char *)l3 - data; // MAC header bytes at egress
	__u32 avail = linear > before ? linear - before : 0;
	e->caplen = avail < CAPTURE ? avail : CAPTURE;
	e->flags = flags;
	if (bpf_probe_read_kernel(e->pkt, CAPTURE, l3))
		__builtin_memset(e->pkt, 0, CAPTURE);
	bpf_ringbuf_submit(e, 0);
	return 1;
}

static __always_inline int emit(__u32 node, __u8 kind, __u8 flags, const void *l3, __u16 proto,
				const struct sk_buff *skb, __u32 in_if, __u32 out_if, __u64 in_ns,
				__u64 out_ns, __u32 reason, const struct net_device *dev)
{
	struct emit_args a = {
		.in_ns = in_ns,
		.out_ns = out_ns,
		.l3 = l3,
		.node = node,
		.in_if = in_if,
		.out_if = out_if,
		.reason = reason,
		.proto = proto,
		.kind = kind,
		.flags = flags,
	};
	return emit_event(&a, skb, dev);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(on_receive, struct sk_buff *skb)
{
	const struct net_device *dev = skb->dev;
	__u32 node = ours(dev);
	if (!node)
		return 0;
	count(C_RX);
	__u16 proto = bpf_ntohs(skb->protocol);
	const void *l3 = l3_of(skb, 1);
	struct parsed p;
	// A packet's outcome is counted once, where it ends here: when it leaves, or when it is
	// delivered to this host (an IP packet to one of its addresses). Neither is known yet.
	if (!parse(l3, proto, &p))
		return 0;
	p.key.node = node;
	int w = watched(&p.key);
	__u32 in_if = dev->ifindex;
	if (w < 0)
		return 0;
	// Delivered to this host: its hop ends here (no egress), reported now.
	if (is_local(node, p.key.dst, proto == ETH_P_IP)) {
		count(C_LOCAL);
		if (!w) {
			count(C_UNWATCHED);
			return 0;
		}
		__u64 now = bpf_ktime_get_ns();
		if (!flow_due(&p.key, now, in_if, 0, 0)) {
			count(C_FILTERED);
			return 0;
		}
		if (emit(node, K_LOCAL, F_INGRESS | F_INGRESS_TS | F_FLOW_DUE, l3, proto, skb, in_if, 0, now, now, 0, 0))
			count(C_EVENTS);
		else
			count(C_RING_FULL);
		return 0;
	}
	// Forwarded (or dropped on the way): remember when it came in, for its egress or drop.
	if (w || queue_trigger_ns) {
		__u64 now = bpf_ktime_get_ns();
		__u64 id = skb_id(skb);
		__u32 i = skb_slot(id);
		struct ingress_slot *r = bpf_map_lookup_elem(&ingress_at, &i);
		if (r) {
			r->skb = id;
			r->at = now;
			r->ifindex = in_if;
			r->ip_id = p.ip_id;
			r->node = node;
		}
	}
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(on_transmit, struct sk_buff *skb, const struct net_device *dev)
{
	__u32 node = ours(dev);
	if (!node)
		return 0;
	count(C_TX);
	__u16 proto = bpf_ntohs(skb->protocol);
	const void *l3 = l3_of(skb, 0);
	struct parsed p;
	if (!parse(l3, proto, &p)) {
		count(C_NOT_IP);
		return 0;
	}
	p.key.node = node;
	int w = watched(&p.key);
	if (w < 0) {
		count(C_REPORTS);
		return 0;
	}
	if (!w && !queue_trigger_ns) {
		count(C_UNWATCHED);
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u32 out_if = dev->ifindex;
	__u8 flags = 0;
	__u32 in_if = 0;
	__u64 in_ns = 0;
	if (take_ingress(skb_id(skb), node, p.ip_id, now, &in_if, &in_ns)) {
		flags |= F_INGRESS | F_INGRESS_TS;
	} else {
		count(C_NO_INGRESS);
		// Forwarded, its record lost (its slot taken by another packet while it waited in a
		// long queue): the port it came in by is still the skb's own, only its time is gone.
		// Without it the postcard would name no ingress, and the path would seem to start here.
		if (skb->skb_iif) {
			in_if = skb->skb_iif;
			flags |= F_INGRESS;
		}
		// Sent by this host: its stack's departure time where it set one (TCP's EDT,
		// CLOCK_MONOTONIC), else the residence is unknown.
		__u64 ts = skb->tstamp;
		if (ts && ts <= now && now - ts < MAX_RESIDENCE_NS) {
			in_ns = ts;
			flags |= F_INGRESS_TS;
		}
	}
	__u32 latency = in_ns ? (__u32)(now - in_ns) : 0;
	__u32 queue = skb->queue_mapping;
	int q = queue_due(node, out_if, queue, latency, &flags);
	if (!w && !q) {
		count(C_UNWATCHED);
		return 0;
	}
	// A watched packet's flow report may be due even while its queue reports.
	if (w && flow_due(&p.key, now, in_if, out_if, latency))
		flags |= F_FLOW_DUE;
	else if (!q) {
		count(C_FILTERED);
		return 0;
	}
	if (emit(node, K_FLOW, flags, l3, proto, skb, in_if, out_if, in_ns, now, 0, dev))
		count(C_EVENTS);
	else
		count(C_RING_FULL);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(on_drop, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	const struct net_device *dev = skb->dev;
	__u32 node = ours(dev);
	if (!node)
		return 0;
	__u32 ifindex = dev->ifindex;
	count(C_DROPS);
	__u16 proto = bpf_ntohs(skb->protocol);
	const void *l3 = l3_of(skb, 0);
	struct parsed p;
	if (!parse(l3, proto, &p)) {
		count(C_DROP_NOT_IP);
		return 0;
	}
	p.key.node = node;
	int w = watched(&p.key);
	if (w < 0 || (!w && !drops_all)) {
		count(C_DROP_UNWATCHED);
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u8 flags = 0;
	__u32 in_if = 0, out_if = 0;
	__u64 in_ns = 0;
	if (take_ingress(skb_id(skb), node, p.ip_id, now, &in_if, &in_ns))
		flags |= F_INGRESS | F_INGRESS_TS;
	else if (skb->skb_iif) {
		// No record (the flow is not watched, or its slot was taken): the port it came in by
		// is still the skb's own, so a queue's tail drop is still placed at its egress port.
		in_if = skb->skb_iif;
		flags |= F_INGRESS;
	}
	// Dropped on the way out (qdisc, tc egress, neighbour): the device is the egress.
	// Otherwise it is where the packet came in.
	if (in_if && in_if != ifindex) {
		out_if = ifindex;
		flags |= F_EGRESS_DROP;
	} else if (!in_if) {
		in_if = ifindex;
		flags |= F_INGRESS;
	}
	if (filters_on) {
		__u64 *last = bpf_map_lookup_elem(&drops, &p.key);
		if (last && now - *last < interval_ns) {
			count(C_DROP_FILTERED);
			return 0;
		}
		bpf_map_update_elem(&drops, &p.key, &now, BPF_ANY);
	}
	if (emit(node, K_DROP, flags, l3, proto, skb, in_if, out_if, in_ns, now, reason, 0))
		count(C_DROP_EVENTS);
	else
		count(C_DROP_RING_FULL);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

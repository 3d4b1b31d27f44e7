// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// intscope INT-MD / INT-MX data path: source, transit and sink at tc (clsact), in the kernel.
//
// Two tc programs and one BTF tracepoint:
//   int_ingress  (tc ingress, every watched interface; the sink role's too, see there): stamps
//                the packet's arrival time into
//                skb->tstamp as a monotonic delivery time. The kernel keeps a delivery time
//                across forwarding (skb_clear_tstamp() leaves a mono tstamp alone) and across a
//                veth into another namespace, so the same sk_buff reaches tc egress with it: the
//                hop's ingress timestamp needs no table.
//   int_egress   (tc egress, source and transit interfaces): the INT role of the interface
//                (map `roles`): source inserts INT, transit pushes its metadata. The sink role
//                runs at tc ingress: strips INT and hands the stack to userspace, which sends the
//                Telemetry Report (for a forwarded packet once on_xmit saw it leave).
//   on_xmit      (tp_btf/net_dev_start_xmit, after the qdisc): per role interface, the root
//                qdisc's backlog and the time the last packet spent in it (now - the tstamp
//                int_egress wrote). tc egress runs before the qdisc, so a packet's metadata is
//                written before its own queueing is known: its hop latency adds the sojourn of
//                the packet before it, its queue occupancy is the backlog that packet left.
//                On any device of the namespace: a sink's report held for the packet leaving
//                (`pending`), sent with its egress, latency and queue.
//
// Encapsulation (INT v2.1 §"INT over TCP/UDP"), setting `encap`:
//   NPT 2 (udp-new, the default): "a new UDP header is inserted between the IP header and the
//     original L4 header": [IP][UDP (INT port)][shim][MD or MX header][metadata][original
//     TCP/UDP header][payload], for TCP and UDP, IPv4 and IPv6. The original L4 header and
//     payload never move in memory (bpf_skb_adjust_room at BPF_ADJ_ROOM_NET moves the bytes
//     *before* the room), so a CHECKSUM_PARTIAL packet's csum_start still points at its L4
//     header and its pseudo-header seed stays right (same addresses, same L4 length); the new
//     UDP header's checksum is zero ("It is recommended that the checksum in the new UDP header
//     be set to zero", RFC 6936; the node does the same), and its source port a hash of the flow
//     ("It is recommended that the source port number of the new UDP header be calculated using
//     a hash of fields from the original packet").
//   NPT 1 (udp-port): a UDP flow's INT goes right after its own UDP header, whose destination
//     port becomes the INT port (the original in the shim); TCP flows get NPT 2, as the
//     userspace node does.
//   NPT 0 (dscp): INT right after the TCP or UDP header, the IP DSCP (or a bit of it) marking
//     it; the shim keeps the original DSCP, which the sink restores (`restore_dscp`).
//   NPT 0 and 1 put INT inside the L4 checksum's coverage, behind the L4 header. The L4 header
//   must stay where it is in memory: a CHECKSUM_PARTIAL packet (every locally sent packet under
//   the kernel's default offloads, kept across veth) has its checksum written by the device
//   from csum_start, which tc cannot move. So the bytes *after* the INT point move towards the
//   tail (bpf_skb_change_tail, then a copy in MOVE_CHUNK pieces; the sink's removal is the
//   reverse), at a copy of the payload per packet. The L4 checksum is updated with
//   bpf_l4_csum_replace, which for CHECKSUM_PARTIAL adjusts only the pseudo-header seed (the
//   device sums the moved bytes itself) and otherwise the whole checksum, as the node does; a
//   zero UDP checksum stays zero. The Checksum Complement (instruction bit 15) is written all
//   ones ("not used"): the checksum itself is kept right instead.
//
// GSO packets (gso_size set) get no INT and are counted (C_GSO_SKIPPED): with an outer
// UDP header announcing protocol 17, the kernel's segmentation would take a TCP super-packet
// for a UDP one and drop it; passing it unchanged is the only way that never corrupts a frame.
//
// Reports (a sink's stack, an INT-MX hop's own metadata) pass SD-Fabric's flow filter
// (flow_filter.h, the INT-XD postcards' own) before they reach the ring buffer: unfiltered, every
// INT packet is a report userspace builds and sends, on the cores that forward the packets.
//
// Every packet seen at egress ends in exactly one outcome counter; every packet this program
// drops is counted by reason (C_DROP_*); every report due, filtered or lost to a full ring in
// one of C_EVENTS, C_FILTERED, C_RING_FULL.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "flow_filter.h"

#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define TC_ACT_NEXT (-1) // TCX_NEXT; TC_ACT_UNSPEC to a classic filter
#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define CAPTURE 256
// A non-zero length of at most 128 the verifier can bound (clang may check one register and
// pass another): the identity for 1..128.
#define SIZE(n) ((((n) - 1) & 127) + 1)
#define MAX_SOJOURN_NS 1000000000ULL
#define MAX_RESIDENCE_NS 4000000000ULL

// Roles of an egress interface (map `roles`).
#define ROLE_SOURCE 1
#define ROLE_TRANSIT 2
#define ROLE_SINK 3

// Settings, written by the loader (constant-folded by the verifier).
const volatile __u32 netns_inum = 0;     // the namespace whose devices on_xmit watches
const volatile __u32 node_id = 1;
const volatile __u32 int_type = 1;       // 1: INT-MD, 3: INT-MX (shim Type)
const volatile __u32 instructions = 0xf000;
const volatile __u32 hop_ml = 4;         // words of this node's metadata (MD)
const volatile __u32 max_hops = 8;       // Remaining Hop Count at the source
const volatile __u32 int_port = 17768;   // UDP destination port of INT (INT_TBD)
const volatile __u32 udp_sport_base = 0xc000; // new UDP header's source port: base | hash
const volatile __u32 mtu_cap = 1500;     // the node's egress MTU (the device's if smaller)
const volatile __u32 report_port = 32766;
const volatile __u64 unix_offset_ns = 0; // CLOCK_REALTIME - CLOCK_MONOTONIC at load
const volatile __u32 watch_all = 0;
#define ENC_DSCP 0     // NPT 0
#define ENC_UDP_PORT 1 // NPT 1 for UDP, NPT 2 for TCP
#define ENC_UDP_NEW 2  // NPT 2
const volatile __u32 encap = ENC_UDP_NEW;
const volatile __u32 int_dscp = 0x17;    // the DSCP bits (under int_dscp_mask) marking INT
const volatile __u32 int_dscp_mask = 0x3f;
const volatile __u32 remark_dscp = 0;    // written under the mask on marked packets without INT
const volatile __u32 remark_on = 1;      // 0: such packets pass unchanged (C_MARKED_NO_INT)
const volatile __u32 restore_dscp = 1;   // sink: the original DSCP from the shim
#define WATCH_FAST 16
const volatile __u32 watch_count = 0;
const volatile __u8 watch_prefixes[WATCH_FAST * 32] = {};

enum counter {
	C_SEEN = 0,       // packets sent on a role interface
	C_NOT_IP,         // not IPv4/IPv6, or headers unreadable
	C_UNSUPPORTED_IP, // IPv4 options, IPv6 extension headers, not TCP/UDP
	C_FRAGMENT,       // IP fragments: never changed
	C_UNWATCHED,      // source: on no watchlist
	C_REPORTS,        // report traffic
	C_GSO_SKIPPED,    // source: GSO packets passed without INT
	C_HAS_INT,        // source: INT already present, passed
	C_INSERTED,       // source: INT inserted with this hop's metadata
	C_INSERTED_M,     // source: INT inserted without metadata (M bit, or RHC 0)
	C_TOO_BIG,        // source: even the fixed headers exceed the MTU: no INT
	C_NOT_INT,        // transit/sink: no INT (NPT 2, our port) in the packet
	C_ADDED,          // transit: metadata pushed
	C_HOP_LIMIT,      // transit: Remaining Hop Count 0, E bit set
	C_MTU,            // transit: no room, M bit set
	C_MX_SEEN,        // transit: INT-MX, reported, unchanged
	C_SUNK,           // sink: INT removed (and reported)
	C_MALFORMED,      // transit/sink: INT headers inconsistent, passed unchanged
	C_UNSUPPORTED_INT,// transit/sink: INT this data path does not edit (NPT 0/1, other version)
	C_ADJUST_FAILED,  // bpf_skb_adjust_room refused: passed unchanged
	C_DROP_HELPER,    // dropped: a rewrite failed half-way (the frame would be corrupt)
	C_DROP_DISCARD,   // dropped: D bit at the sink (after its report)
	C_EVENTS,         // events sent to userspace (reports)
	C_RING_FULL,      // events lost: ring buffer full
	C_FILTERED,       // events the flow report filter held back (flow_filter.h)
	C_NO_INGRESS_TS,  // packets with no ingress time (originated here): latency unknown
	C_STAMPED,        // ingress: packets stamped
	C_REMARKED,       // source (dscp): marked with INT's DSCP without INT, DSCP rewritten
	C_MARKED_NO_INT,  // source (dscp): marked with INT's DSCP without INT, passed (skip)
	C_TOO_LONG,       // NPT 0/1: more bytes to move than MOVE_MAX chunks; passed unchanged
	C_DEFERRED,       // sink: reports waiting for their packet's egress (`pending`)
	C_DEFER_SENT,     // of those: sent at the egress, with its interface, latency and queue
	C_DEFER_LOST,     // of those: lost at the egress to a full ring buffer
	C_PENDING_FULL,   // sink: `pending` full, the report sent at once without its egress
	C_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// ifindex -> role, for this namespace's interfaces (bounded: 1024 interfaces).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} roles SEC(".maps");

// The INT domains this node knows (INT v2.1 §"INT-MD Metadata Header Format", Domain Specific
// ID: "If the Domain Specific ID matches any Domain ID known to this node, then additional
// processing of the Domain Specific Flags (DS Flags) and Domain Specific Instruction (DS
// Instruction) is required"), written by the loader from the node's `[[domains]]`: per DS ID
// and DS Instruction made of the domain's defined bits, the export metadata a transit hop
// pushes; per DS ID, the DS Flags it sets. A DS Instruction with an undefined bit finds no
// entry: the domain is unknown to the packet and its words are all ones, as the node pads.
#define DOMAIN_ENTRIES 4096
struct ds_export {
	__u32 len;        // bytes of export metadata
	__u32 pad;
	__u8 md[124];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DOMAIN_ENTRIES);
	__type(key, __u32); // DS ID << 16 | DS Instruction
	__type(value, struct ds_export);
} ds_exports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32); // DS ID
	__type(value, __u32); // DS Flags set
} ds_flags_set SEC(".maps");

// Per egress interface (ifindex % 1024): what the last packet met in its qdisc.
#define QUEUE_SLOTS 1024
struct queue_state {
	__u64 at;         // when measured (CLOCK_MONOTONIC)
	__u32 sojourn_ns; // time the last packet spent between tc egress and the driver
	__u32 backlog;    // bytes in the root qdisc then
	__u32 ifindex;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QUEUE_SLOTS);
	__type(key, __u32);
	__type(value, struct queue_state);
} queues SEC(".maps");

// What userspace receives: the frame from its Ethernet header as it leaves this hop (sink:
// as it arrived, before INT is stripped), with this hop's measurements.
#define K_SINK 1
#define K_MX 2      // INT-MX at a source or transit hop
#define K_MX_SINK 3 // INT-MX at the sink
#define F_INGRESS_TS 1
#define F_QUEUE 2
#define F_EGRESS 4   // egress known (not at a sink, which works at ingress)
struct event {
	__u8 kind;
	__u8 flags;
	__u16 caplen;
	__u32 pkt_len;       // skb->len (from the Ethernet header)
	__u32 ingress_if;
	__u32 egress_if;
	__u64 ingress_ns;    // CLOCK_MONOTONIC
	__u64 egress_ns;
	__u32 latency_ns;
	__u32 backlog;
	__u32 queue_id;
	__u32 pad;
	__u8 pkt[CAPTURE];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");
// Bytes of events waiting that wake userspace (~800 events; a sixteenth of the ring).
#define WAKE_BYTES (256 << 10)

// A forwarding sink's report waits in `pending` for its packet to leave (on_xmit), which gives
// the sink's egress interface, hop latency and queue (INT v2.1 §"INT Sink Node": the sink's own
// metadata). The packet is known by its arrival time (the delivery time int_ingress wrote, which
// forwarding keeps), its IP length once INT is out and its IPv4 Identification (IPv6 Flow
// Label): what the IP header says at any egress device, L2 or L3. Userspace sends what waited
// past PENDING_TIMEOUT without its egress (delivered or dropped here after all, fragmented, or
// re-stamped by a role at its egress) and deletes it; whoever deletes an entry sends it.
#define PENDING_MAX 4096
struct pending_key {
	__u64 tstamp;
	__u32 ip_len;
	__u32 ident;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PENDING_MAX);
	__type(key, struct pending_key);
	__type(value, struct event);
} pending SEC(".maps");

// [0]: entries the kernel put in `pending` less those it took out (atomic); [1]: those
// userspace took out, its running total (written by userspace alone). on_xmit looks only while
// [0] > [1]: no write races the other side's.
#define HELD_BY_KERNEL 0
#define TAKEN_BY_USER 1
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} pending_count SEC(".maps");

static __always_inline __u64 *pending_slot(__u32 i)
{
	return bpf_map_lookup_elem(&pending_count, &i);
}

// Whether any sink report may wait in `pending`.
static __always_inline int any_pending(void)
{
	__u64 *held = pending_slot(HELD_BY_KERNEL), *taken = pending_slot(TAKEN_BY_USER);
	return held && taken && *held > *taken;
}

// Per-CPU scratch: this hop's metadata (at most 31 words), the headers being rewritten and,
// at an INT-MD sink, the newest STACK_BYTES of the stack (for the flow filter).
#define STACK_BYTES 256
// NPT 0/1 move the bytes behind the INT point through `move`, MOVE_CHUNK at a time, at most
// MOVE_MAX chunks (10 KiB: a 9 000-byte jumbo frame's payload; the loader caps the MTU there).
#define MOVE_CHUNK 512
#define MOVE_MAX 20
struct scratch {
	__u8 meta[128];
	__u8 hdr[64];
	__u32 stack[STACK_BYTES / 4];
	__u8 move[MOVE_CHUNK];
	struct event ev; // a sink's report on its way to `pending`
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
}

struct ip {
	__u8 addr[32] __attribute__((aligned(8))); // source, destination (IPv4 mapped)
	__u32 l4;        // offset of the L4 header (= the room's offset)
	__u32 len;       // IP packet length
	__u8 v6;
	__u8 proto;
	__u8 dscp;
	__u32 ident;     // IPv4 Identification, IPv6 Flow Label: what names the packet (`pending`)
};

// What names a packet in its IP header `h` (`pending`): the IPv4 Identification, the IPv6 Flow
// Label.
static __always_inline __u32 ip_ident(const __u8 *h, int v6)
{
	if (v6)
		return ((__u32)(h[1] & 0x0f) << 16) | ((__u32)h[2] << 8) | h[3];
	return ((__u32)h[4] << 8) | h[5];
}

// The IP header at ETH_HLEN. 0: no IP; -1: IP this path does not handle, its version and DSCP
// read (counted here); -2: a fragment or a truncated packet (counted here).
static __always_inline int parse_ip(struct __sk_buff *skb, struct ip *ip)
{
	__u8 h[40];
	__u16 proto = bpf_ntohs(skb->protocol);
	__builtin_memset(ip->addr, 0, 32);
	if (proto == ETH_P_IP) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN, h, 20))
			return 0;
		ip->v6 = 0;
		ip->dscp = h[1] >> 2;
		if ((h[0] >> 4) != 4) {
			count(C_NOT_IP);
			return -2;
		}
		if (((h[6] & 0x3f) | h[7]) != 0) {
			count(C_FRAGMENT);
			return -2;
		}
		if (h[0] != 0x45) {
			count(C_UNSUPPORTED_IP);
			return -1;
		}
		ip->l4 = ETH_HLEN + 20;
		ip->len = ((__u32)h[2] << 8) | h[3];
		ip->proto = h[9];
		ip->ident = ip_ident(h, 0);
		ip->addr[10] = 0xff; ip->addr[11] = 0xff;
		ip->addr[26] = 0xff; ip->addr[27] = 0xff;
		__builtin_memcpy(&ip->addr[12], &h[12], 4);
		__builtin_memcpy(&ip->addr[28], &h[16], 4);
	} else if (proto == ETH_P_IPV6) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN, h, 40))
			return 0;
		if ((h[0] >> 4) != 6)
			return 0;
		ip->v6 = 1;
		ip->l4 = ETH_HLEN + 40;
		ip->len = 40 + (((__u32)h[4] << 8) | h[5]);
		ip->proto = h[6];
		ip->dscp = ((h[0] & 0x0f) << 2) | (h[1] >> 6);
		ip->ident = ip_ident(h, 1);
		if (ip->proto == 44) {
			count(C_FRAGMENT);
			return -2;
		}
		__builtin_memcpy(ip->addr, &h[8], 32);
	} else {
		return 0;
	}
	if (ip->proto != IPPROTO_TCP && ip->proto != IPPROTO_UDP) {
		count(C_UNSUPPORTED_IP);
		return -1;
	}
	if (ETH_HLEN + ip->len > skb->len) {
		count(C_NOT_IP);
		return -2;
	}
	return 1;
}

static __always_inline int watched(const __u8 *addr)
{
	if (watch_all)
		return 1;
	__u64 s0, s1, d0, d1;
	__builtin_memcpy(&s0, addr, 8);
	__builtin_memcpy(&s1, addr + 8, 8);
	__builtin_memcpy(&d0, addr + 16, 8);
	__builtin_memcpy(&d1, addr + 24, 8);
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

// This hop's measurements.
struct hop {
	__u64 in_ns;     // 0: unknown
	__u64 out_ns;
	__u32 in_if;
	__u32 out_if;
	__u32 latency;   // ~0: unknown
	__u32 queue;     // queue id << 24 | occupancy; ~0: unknown
	__u32 backlog;
	__u8 has_queue;
};

static __always_inline void measure(struct __sk_buff *skb, struct hop *m)
{
	__u64 now = bpf_ktime_get_ns();
	m->out_ns = now;
	m->out_if = skb->ifindex;
	m->in_if = skb->ingress_ifindex;
	m->in_ns = 0;
	m->latency = ~0U;
	m->queue = ~0U;
	m->backlog = 0;
	m->has_queue = 0;
	__u64 ts = skb->tstamp;
	// A forwarded packet carries int_ingress's stamp; a packet this host sent carries its
	// stack's departure time where it set one (TCP's EDT), else nothing.
	if (skb->tstamp_type == BPF_SKB_CLOCK_MONOTONIC && ts && ts <= now &&
	    now - ts < MAX_RESIDENCE_NS)
		m->in_ns = ts;
	else
		count(C_NO_INGRESS_TS);
	__u32 slot = m->out_if & (QUEUE_SLOTS - 1);
	struct queue_state *q = bpf_map_lookup_elem(&queues, &slot);
	__u32 sojourn = 0;
	if (q && q->ifindex == m->out_if && now - q->at < MAX_SOJOURN_NS) {
		sojourn = q->sojourn_ns;
		m->backlog = q->backlog;
		m->has_queue = 1;
	} else if (q) {
		// No packet left this device for a second: its queue is empty.
		m->has_queue = 1;
	}
	if (m->has_queue) {
		__u32 occ = m->backlog > 0xffffff ? 0xffffff : m->backlog;
		m->queue = ((skb->queue_mapping & 0xff) << 24) | occ;
	}
	if (m->in_ns) {
		__u64 l = now - m->in_ns + sojourn;
		m->latency = l >= 0xffffffffULL ? 0xfffffffe : (__u32)l;
	}
}

static __always_inline void put32(__u8 *buf, __u32 off, __u32 v)
{
	if (off > 124)
		return;
	__u32 be = bpf_htonl(v);
	__builtin_memcpy(&buf[off & 127], &be, 4);
}

// This hop's metadata for `instr` into `buf`, `words` words long (INT v2.1 §"INT-MD Metadata
// Header Format": the fields of the set bits, bit 0 first; what this hop cannot provide — Tx
// utilization, buffer, reserved bits, the Checksum Complement (all ones: "not used", the
// original L4 checksum is untouched under NPT 2) — is all ones, the spec's invalid value).
static __always_inline void encode(__u8 *buf, __u32 instr, __u32 words, const struct hop *m)
{
	for (int i = 0; i < 32; i++)
		put32(buf, i * 4, ~0U);
	__u32 off = 0;
	__u64 in_unix = m->in_ns ? m->in_ns + unix_offset_ns : ~0ULL;
	__u64 out_unix = m->out_ns + unix_offset_ns;
	if (instr & 0x8000) { put32(buf, off, node_id); off += 4; }
	if (instr & 0x4000) {
		put32(buf, off, ((m->in_if & 0xffff) << 16) | (m->out_if & 0xffff));
		off += 4;
	}
	if (instr & 0x2000) { put32(buf, off, m->latency); off += 4; }
	if (instr & 0x1000) { put32(buf, off, m->queue); off += 4; }
	if (instr & 0x0800) {
		put32(buf, off, in_unix >> 32);
		put32(buf, off + 4, (__u32)in_unix);
		off += 8;
	}
	if (instr & 0x0400) {
		put32(buf, off, out_unix >> 32);
		put32(buf, off + 4, (__u32)out_unix);
		off += 8;
	}
	if (instr & 0x0200) {
		put32(buf, off, m->in_if);
		put32(buf, off + 4, m->out_if);
		off += 8;
	}
	// Bits 7 (Tx utilization), 8 (buffer), 9-14 and 15 stay all ones; past `words` nothing is
	// copied into the packet.
	(void)words;
}

// Event `e` of `kind` about `skb` as it is now, with this hop's measurements `m`.
static __always_inline void fill(struct event *e, struct __sk_buff *skb, __u8 kind,
				 const struct hop *m)
{
	e->kind = kind;
	e->flags = (m->in_ns ? F_INGRESS_TS : 0) | (m->has_queue ? F_QUEUE : 0) |
		   (m->out_if ? F_EGRESS : 0);
	e->pkt_len = skb->len;
	e->ingress_if = m->in_if;
	e->egress_if = m->out_if;
	e->ingress_ns = m->in_ns;
	e->egress_ns = m->out_ns;
	e->latency_ns = m->latency;
	e->backlog = m->backlog;
	e->queue_id = skb->queue_mapping;
	e->pad = 0;
	__builtin_memset(e->pkt, 0, CAPTURE);
	__u32 n;
	if (skb->len >= CAPTURE) {
		n = CAPTURE;
		bpf_skb_load_bytes(skb, 0, e->pkt, CAPTURE);
	} else {
		// Shorter: the bytes there are (a mask the verifier reads as the bound).
		n = skb->len & (CAPTURE - 1);
		if (n)
			bpf_skb_load_bytes(skb, 0, e->pkt, n);
	}
	e->caplen = n;
}

// Userspace is woken once a batch waits (and polls every 100 ms anyway): a wake-up per event
// would cost a context switch per INT packet on the cores that forward them.
static __always_inline void submit(struct event *e)
{
	__u64 waiting = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(e, waiting >= WAKE_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

// Bytes of the INT v2.1 baseline metadata `instr` asks for (§"INT-MD Metadata Header Format":
// bits 4, 5 and 6, the timestamps and the 32-bit interfaces, are two words; the rest one).
static __always_inline __u32 baseline_bytes(__u32 instr)
{
	return 4 * (__builtin_popcount(instr & 0xffff) + __builtin_popcount(instr & 0x0e00));
}

// A domain's export metadata `ds` into a hop's metadata `buf` at `at`.
static __always_inline void put_domain(__u8 *buf, __u32 at, const struct ds_export *ds)
{
	for (int i = 0; i < 31; i++) {
		if (i * 4 >= ds->len || at + i * 4 > 124)
			break;
		__u32 w;
		__builtin_memcpy(&w, &ds->md[(i * 4) & 127], 4);
		__builtin_memcpy(&buf[(at + i * 4) & 124], &w, 4);
	}
}

static __always_inline void emit(struct __sk_buff *skb, __u8 kind, const struct hop *m)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(C_RING_FULL);
		return;
	}
	fill(e, skb, kind, m);
	submit(e);
	count(C_EVENTS);
}

// Whether this hop's report about flow (addresses of `ip`, the original `proto` and ports) is
// due by the flow filter (flow_filter.h: SD-Fabric's smart filter, as the INT-XD agent runs
// it), this hop's ports `in_if` / `out_if` and latency `bucket` compared with the flow's last
// report; a report held back is counted (C_FILTERED).
static __always_inline int report_due(const struct ip *ip, __u8 proto, const __u8 *ports,
				      __u64 now, __u32 in_if, __u32 out_if, __u32 bucket)
{
	struct flow_key k;
	__builtin_memcpy(k.src, ip->addr, 32);
	k.sport = ((__u16)ports[0] << 8) | ports[1];
	k.dport = ((__u16)ports[2] << 8) | ports[3];
	k.proto = proto;
	k.node = 1;
	k.pad[0] = 0;
	k.pad[1] = 0;
	if (flow_due_bucket(&k, now, in_if, out_if, bucket))
		return 1;
	count(C_FILTERED);
	return 0;
}

// The IP header's length field (and IPv4 protocol, header checksum) after `delta` bytes and a
// new protocol `proto` (0: unchanged). 0 on success.
static __always_inline int fix_ip(struct __sk_buff *skb, const struct ip *ip, int delta,
				  __u8 old_proto, __u8 proto)
{
	if (ip->v6) {
		// No header checksum: a CHECKSUM_COMPLETE packet's skb->csum follows the change
		// (IPv4's header checksum keeps the header's sum, and so skb->csum, unchanged).
		__u16 plen = bpf_htons(ip->len - 40 + delta);
		if (bpf_skb_store_bytes(skb, ETH_HLEN + 4, &plen, 2, BPF_F_RECOMPUTE_CSUM))
			return -1;
		if (proto &&
		    bpf_skb_store_bytes(skb, ETH_HLEN + 6, &proto, 1, BPF_F_RECOMPUTE_CSUM))
			return -1;
		return 0;
	}
	__u16 old_len = bpf_htons(ip->len), new_len = bpf_htons(ip->len + delta);
	if (bpf_skb_store_bytes(skb, ETH_HLEN + 2, &new_len, 2, 0) ||
	    bpf_l3_csum_replace(skb, ETH_HLEN + 10, old_len, new_len, 2))
		return -1;
	if (proto) {
		// The protocol shares a 16-bit checksum word with the TTL.
		__u8 w[2];
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 8, w, 2))
			return -1;
		__u16 old_w, new_w;
		__builtin_memcpy(&old_w, w, 2);
		w[1] = proto;
		__builtin_memcpy(&new_w, w, 2);
		if (bpf_skb_store_bytes(skb, ETH_HLEN + 9, &proto, 1, 0) ||
		    bpf_l3_csum_replace(skb, ETH_HLEN + 10, old_w, new_w, 2))
			return -1;
	}
	(void)old_proto;
	return 0;
}

static __always_inline __u32 mtu_of(struct __sk_buff *skb)
{
	__u32 mtu = 0;
	// The device's MTU (bpf_check_mtu fills it in whatever the verdict).
	bpf_check_mtu(skb, 0, &mtu, 0, 0);
	if (!mtu || mtu > mtu_cap)
		mtu = mtu_cap;
	return mtu;
}

// Whether DSCP `dscp` carries INT's marking (`int_dscp` under `int_dscp_mask`).
static __always_inline int dscp_marks_int(__u8 dscp)
{
	return (dscp & int_dscp_mask) == (int_dscp & int_dscp_mask);
}

// The IP header's DSCP set to `dscp`, ECN kept; IPv4's header checksum follows. 0 on success.
static __always_inline int set_dscp(struct __sk_buff *skb, const struct ip *ip, __u8 dscp)
{
	__u8 w[2];
	if (bpf_skb_load_bytes(skb, ETH_HLEN, w, 2))
		return -1;
	if (ip->v6) {
		// Version (4 bits), Traffic Class (DSCP 6, ECN 2), the Flow Label's first 4 bits.
		w[0] = (w[0] & 0xf0) | ((dscp >> 2) & 0x0f);
		w[1] = ((dscp & 3) << 6) | (w[1] & 0x3f);
		return bpf_skb_store_bytes(skb, ETH_HLEN, w, 2, BPF_F_RECOMPUTE_CSUM) ? -1 : 0;
	}
	__u16 old_w, new_w;
	__builtin_memcpy(&old_w, w, 2);
	w[1] = (dscp << 2) | (w[1] & 3);
	__builtin_memcpy(&new_w, w, 2);
	if (bpf_skb_store_bytes(skb, ETH_HLEN + 1, &w[1], 1, 0) ||
	    bpf_l3_csum_replace(skb, ETH_HLEN + 10, old_w, new_w, 2))
		return -1;
	return 0;
}

// INT's marking replaced by `remark_dscp` (counted); -1: a helper failed (counted: drop it).
static __always_inline int remark(struct __sk_buff *skb, struct ip *ip)
{
	__u8 remarked = (ip->dscp & ~int_dscp_mask) | (remark_dscp & int_dscp_mask);
	if (set_dscp(skb, ip, remarked)) {
		count(C_DROP_HELPER);
		return -1;
	}
	ip->dscp = remarked;
	count(C_REMARKED);
	return 0;
}

// The L4 header's length (UDP 8, TCP its Data Offset); 0 when unreadable or below 20.
static __always_inline __u32 l4_header_len(struct __sk_buff *skb, const struct ip *ip)
{
	if (ip->proto == IPPROTO_UDP)
		return 8;
	__u8 doff;
	if (bpf_skb_load_bytes(skb, ip->l4 + 12, &doff, 1))
		return 0;
	__u32 n = (doff >> 4) * 4;
	return n >= 20 ? n : 0;
}

// Bytes from the L4 header to the end of the IP packet.
static __always_inline __u32 l4_bytes(const struct ip *ip)
{
	return ip->len - (ip->l4 - ETH_HLEN);
}

static __always_inline __u32 csum_at(const struct ip *ip)
{
	return ip->l4 + (ip->proto == IPPROTO_TCP ? 16 : 6);
}

// A zero UDP checksum (none, RFC 768) stays zero; a result of zero is written all ones.
static __always_inline __u64 csum_flags(const struct ip *ip)
{
	return ip->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
}

// Bytes whose sum is `diff` (bpf_csum_diff's) came into (or, negated, left) the L4 checksum's
// coverage. For CHECKSUM_PARTIAL the kernel leaves the seed alone: the device sums them.
static __always_inline int csum_bytes(struct __sk_buff *skb, const struct ip *ip, __s64 diff)
{
	return bpf_l4_csum_replace(skb, csum_at(ip), 0, diff, csum_flags(ip)) ? -1 : 0;
}

// The 16-bit field at `off`, covered by the L4 checksum, from `from` to `to` (network order).
static __always_inline int csum_field(struct __sk_buff *skb, const struct ip *ip, __u32 off,
				      __u16 from, __u16 to)
{
	if (bpf_l4_csum_replace(skb, csum_at(ip), from, to, csum_flags(ip) | 2) ||
	    bpf_skb_store_bytes(skb, off, &to, 2, 0))
		return -1;
	return 0;
}

// The L4 length from `old` to `new` bytes: in the pseudo-header (for CHECKSUM_PARTIAL, its
// seed) and in UDP's length field.
static __always_inline int l4_resize(struct __sk_buff *skb, const struct ip *ip, __u32 old,
				     __u32 new)
{
	__u16 o = bpf_htons(old), n = bpf_htons(new);
	if (bpf_l4_csum_replace(skb, csum_at(ip), o, n, csum_flags(ip) | BPF_F_PSEUDO_HDR | 2))
		return -1;
	if (ip->proto == IPPROTO_UDP)
		return csum_field(skb, ip, ip->l4 + 4, o, n);
	return 0;
}

// What moving bytes inside a packet came to.
#define MOVED 0
#define MOVE_TOO_LONG 1 // more than MOVE_MAX chunks: nothing changed
#define MOVE_REFUSED 2  // the kernel would not resize the packet: nothing changed
#define MOVE_BROKEN 3   // a helper failed half-way: the frame is corrupt

// `n` bytes opened at `at` (NPT 0/1): the packet grows by `n` at its tail and the bytes from
// `at` on move there, the last chunk first; what was at `at` is left for the caller to write.
static __always_inline int open_gap(struct __sk_buff *skb, __u32 at, __u32 n, struct scratch *s)
{
	__u32 len = skb->len;
	if (at > len || len - at > MOVE_MAX * MOVE_CHUNK)
		return MOVE_TOO_LONG;
	if (bpf_skb_change_tail(skb, len + n, 0))
		return MOVE_REFUSED;
	__u32 end = len;
	for (int i = 0; i < MOVE_MAX; i++) {
		if (end <= at)
			break;
		__u32 c = end - at;
		if (c > MOVE_CHUNK)
			c = MOVE_CHUNK;
		c = ((c - 1) & (MOVE_CHUNK - 1)) + 1;
		end -= c;
		if (bpf_skb_load_bytes(skb, end, s->move, c) ||
		    bpf_skb_store_bytes(skb, end + n, s->move, c, 0))
			return MOVE_BROKEN;
	}
	return MOVED;
}

// `n` bytes at `at` removed (NPT 0/1): the bytes behind them move up, the first chunk first, and
// the packet shrinks by `n` at its tail.
static __always_inline int close_gap(struct __sk_buff *skb, __u32 at, __u32 n, struct scratch *s)
{
	__u32 len = skb->len;
	if (at + n > len || len - at - n > MOVE_MAX * MOVE_CHUNK)
		return MOVE_TOO_LONG;
	__u32 from = at + n;
	for (int i = 0; i < MOVE_MAX; i++) {
		if (from >= len)
			break;
		__u32 c = len - from;
		if (c > MOVE_CHUNK)
			c = MOVE_CHUNK;
		c = ((c - 1) & (MOVE_CHUNK - 1)) + 1;
		if (bpf_skb_load_bytes(skb, from, s->move, c) ||
		    bpf_skb_store_bytes(skb, from - n, s->move, c, 0))
			return MOVE_BROKEN;
		from += c;
	}
	return bpf_skb_change_tail(skb, len - n, 0) ? MOVE_BROKEN : MOVED;
}

// A move that did not happen is counted and the packet passes unchanged (TC_ACT_OK); a broken
// one drops it (TC_ACT_SHOT); -1: moved.
static __always_inline int move_verdict(int r)
{
	switch (r) {
	case MOVED:
		return -1;
	case MOVE_TOO_LONG:
		count(C_TOO_LONG);
		return TC_ACT_OK;
	case MOVE_REFUSED:
		count(C_ADJUST_FAILED);
		return TC_ACT_OK;
	default:
		count(C_DROP_HELPER);
		return TC_ACT_SHOT;
	}
}

// INT v2.1 §"INT over TCP/UDP", NPT 0 (DSCP) and NPT 1 (UDP destination port): the shim
// (the original DSCP, or the original port), the MD or MX header `w0` and this hop's `meta`
// bytes of metadata right after the L4 header of `l4h` bytes; the L4 checksum, lengths and the
// marking updated. -1: inserted; else the verdict.
static __always_inline int insert_after_l4(struct __sk_buff *skb, const struct ip *ip,
					   struct scratch *s, const struct hop *m, __u32 npt,
					   __u32 l4h, __u32 w0, __u32 meta, __u16 dport)
{
	__u8 *h = s->hdr;
	h[0] = (int_type << 4) | (npt << 2);
	h[1] = (12 + meta) / 4;
	h[2] = npt == 1 ? dport >> 8 : 0;
	h[3] = npt == 1 ? dport & 0xff : ip->dscp << 2;
	put32(h, 4, w0);
	put32(h, 8, (instructions & 0xffff) << 16);
	put32(h, 12, 0);
	meta &= 127;
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)h, 16, 0);
	if (meta) {
		encode(s->meta, instructions, hop_ml, m);
		sum = bpf_csum_diff(0, 0, (__be32 *)s->meta, meta, sum);
	}
	__u32 at = ip->l4 + l4h, room = 16 + meta, old = l4_bytes(ip);
	if (sum < 0) {
		count(C_DROP_HELPER);
		return TC_ACT_SHOT;
	}
	int v = move_verdict(open_gap(skb, at, room, s));
	if (v >= 0)
		return v;
	__u8 marked = (ip->dscp & ~int_dscp_mask) | (int_dscp & int_dscp_mask);
	if (bpf_skb_store_bytes(skb, at, h, 16, 0) ||
	    (meta && bpf_skb_store_bytes(skb, at + 16, s->meta, SIZE(meta), 0)) ||
	    csum_bytes(skb, ip, sum) || l4_resize(skb, ip, old, old + room) ||
	    (npt == 1 && csum_field(skb, ip, ip->l4 + 2, bpf_htons(dport), bpf_htons(int_port))) ||
	    fix_ip(skb, ip, room, 0, 0) || (npt == 0 && set_dscp(skb, ip, marked))) {
		count(C_DROP_HELPER);
		return TC_ACT_SHOT;
	}
	return -1;
}

// INT v2.1 §"INT over TCP/UDP", NPT 2: a new UDP header, the shim (the original protocol), the
// MD or MX header `w0` and this hop's `meta` bytes of metadata between the IP header and the
// original L4 header. -1: inserted; else the verdict.
static __always_inline int insert_udp(struct __sk_buff *skb, const struct ip *ip,
				      struct scratch *s, const struct hop *m, __u32 w0, __u32 meta,
				      __u16 sport, __u16 dport)
{
	meta &= 127;
	__u32 room = 24 + meta;
	__u8 *h = s->hdr;
	// New UDP header: source port from the flow (ECMP spreads INT flows as it did the
	// originals), the INT port, the length, checksum 0.
	// The flow's hash from the addresses, ports and protocol at hand (bpf_get_hash_recalc
	// would run the flow dissector on every packet a veth or a NIC without RSS hands over).
	__u64 w[4];
	__builtin_memcpy(w, ip->addr, 32);
	__u32 hash = (__u32)mix((w[0] ^ w[1] ^ w[2] ^ w[3]) +
				 (((__u64)sport << 32) | ((__u64)dport << 8) | ip->proto));
	__u16 nsport = bpf_htons(udp_sport_base | (hash & 0x3fff));
	__u16 ndport = bpf_htons(int_port);
	__u16 ulen = bpf_htons(l4_bytes(ip) + room);
	__builtin_memcpy(&h[0], &nsport, 2);
	__builtin_memcpy(&h[2], &ndport, 2);
	__builtin_memcpy(&h[4], &ulen, 2);
	h[6] = 0;
	h[7] = 0;
	// Shim: Type, NPT 2, Length (words after the shim), the original IP protocol in the
	// second content byte.
	h[8] = (int_type << 4) | (2 << 2);
	h[9] = (12 + meta) / 4;
	h[10] = 0;
	h[11] = ip->proto;
	put32(h, 12, w0);
	put32(h, 16, (instructions & 0xffff) << 16);
	put32(h, 20, 0);
	if (meta)
		encode(s->meta, instructions, hop_ml, m);
	if (bpf_skb_adjust_room(skb, room, BPF_ADJ_ROOM_NET, 0)) {
		count(C_ADJUST_FAILED);
		return TC_ACT_OK;
	}
	if (bpf_skb_store_bytes(skb, ip->l4, h, 24, 0) ||
	    (meta && bpf_skb_store_bytes(skb, ip->l4 + 24, s->meta, SIZE(meta), 0)) ||
	    fix_ip(skb, ip, room, ip->proto, IPPROTO_UDP)) {
		count(C_DROP_HELPER);
		return TC_ACT_SHOT;
	}
	return -1;
}

// The INT block of a packet: NPT 2 or 1 behind our UDP port, NPT 0 behind a TCP/UDP header
// under INT's DSCP (with encap dscp). 1: found; 0: not INT; -1: INT this path does not edit,
// or malformed (counted when `counted`: the packet's outcome).
struct block {
	// Bytes 0-7: NPT 2's UDP header, or the L4 header's first 8 (NPT 0/1); 8-23: the shim and
	// the MD/MX header.
	__u8 hdr[24];
	__u32 len;     // shim + shim Length words
	__u32 shim_at; // offset of the shim
	__u8 npt;
	__u8 proto;    // the flow's L4 protocol (NPT 2: the shim's)
};

static __always_inline int find_int(struct __sk_buff *skb, const struct ip *ip, struct block *b,
				    int counted)
{
	if (bpf_skb_load_bytes(skb, ip->l4, b->hdr, 8))
		return 0;
	__u16 dport = ((__u16)b->hdr[2] << 8) | b->hdr[3];
	int port = ip->proto == IPPROTO_UDP && dport == int_port;
	__u32 l4h = 8;
	if (!port) {
		if (encap != ENC_DSCP || !dscp_marks_int(ip->dscp))
			return 0;
		l4h = l4_header_len(skb, ip);
	}
	b->shim_at = ip->l4 + l4h;
	if (!l4h || bpf_skb_load_bytes(skb, b->shim_at, &b->hdr[8], 16)) {
		if (counted)
			count(C_MALFORMED);
		return -1;
	}
	__u8 type = b->hdr[8] >> 4, npt = (b->hdr[8] >> 2) & 3;
	if ((type != 1 && type != 3) || (b->hdr[12] >> 4) != 2 || (port ? npt == 0 : npt != 0) ||
	    npt == 3 || (npt == 2 && (b->hdr[6] || b->hdr[7]))) {
		// Another version or type; NPT 2 with a non-zero outer checksum would need updating.
		if (counted)
			count(C_UNSUPPORTED_INT);
		return -1;
	}
	b->npt = npt;
	b->proto = npt == 2 ? b->hdr[11] : ip->proto;
	b->len = 4 + (__u32)b->hdr[9] * 4;
	__u16 ulen = ((__u16)b->hdr[4] << 8) | b->hdr[5];
	if (b->len < 16 || b->shim_at + b->len > ETH_HLEN + ip->len ||
	    (ip->proto == IPPROTO_UDP && ulen != l4_bytes(ip))) {
		if (counted)
			count(C_MALFORMED);
		return -1;
	}
	return 1;
}

// INT v2.1 §"INT Source Node": the shim, the MD header with this hop's metadata (or the MX
// header alone) — behind a new UDP header between the IP header and the original L4 header
// (NPT 2), or right after the L4 header (NPT 1 for UDP with encap udp-port, NPT 0 with encap
// dscp). §"MTU Settings": no INT when even the headers do not fit; without room for its
// metadata the source sets the M bit and adds none. The remedy the spec recommends is the
// operator's: "the MTU of links between INT sources and sinks be configured to a value higher
// than the MTU of preceding links ... by an appropriate amount". §"INT over TCP/UDP": "Any
// time a node forwards a packet into the INT domain and there is no INT header present, it must
// ensure that the DSCP/Traffic class value is not the same as any of the values used to
// indicate INT": a marked packet without INT is remarked (`remark_dscp`), or passed unchanged.
static __always_inline int source(struct __sk_buff *skb, struct ip *ip, struct scratch *s)
{
	__u8 l4h[8];
	if (bpf_skb_load_bytes(skb, ip->l4, l4h, 8)) {
		count(C_NOT_IP);
		return TC_ACT_OK;
	}
	__u16 sport = ((__u16)l4h[0] << 8) | l4h[1], dport = ((__u16)l4h[2] << 8) | l4h[3];
	if (ip->proto == IPPROTO_UDP) {
		if (dport == report_port || sport == report_port) {
			count(C_REPORTS);
			return TC_ACT_OK;
		}
		if (dport == int_port) {
			count(C_HAS_INT);
			return TC_ACT_OK;
		}
	}
	if (encap == ENC_DSCP && dscp_marks_int(ip->dscp)) {
		struct block b;
		// Not an outcome yet: a marked packet without INT is remarked and goes on.
		if (find_int(skb, ip, &b, 0) == 1) {
			count(C_HAS_INT);
			return TC_ACT_OK;
		}
		if (!remark_on) {
			count(C_MARKED_NO_INT);
			return TC_ACT_OK;
		}
		if (remark(skb, ip))
			return TC_ACT_SHOT;
	}
	if (!watched(ip->addr)) {
		count(C_UNWATCHED);
		return TC_ACT_OK;
	}
	// Any GSO packet, one segment or many: the kernel (or a NIC's TSO) would segment it by
	// its gso_type, which says TCP or UDP of the original L4, behind our UDP header (NPT 2);
	// behind the L4 header (NPT 0/1) the INT block would be cut up as payload.
	if (skb->gso_size || skb->gso_segs > 1) {
		count(C_GSO_SKIPPED);
		return TC_ACT_OK;
	}
	__u32 npt = encap == ENC_DSCP ? 0 : (encap == ENC_UDP_PORT && ip->proto == IPPROTO_UDP) ? 1 : 2;
	__u32 l4_len = 0;
	if (npt != 2) {
		// Behind the L4 header the L4 length changes: UDP's own must agree with IP's.
		__u16 ulen = ((__u16)l4h[4] << 8) | l4h[5];
		l4_len = l4_header_len(skb, ip);
		if (!l4_len || l4_len > l4_bytes(ip) ||
		    (ip->proto == IPPROTO_UDP && ulen != l4_bytes(ip))) {
			count(C_UNSUPPORTED_IP);
			return TC_ACT_OK;
		}
	}
	int md = int_type == 1;
	__u32 meta = md ? hop_ml * 4 : 0;
	__u32 fixed = (npt == 2 ? 8 : 0) + 4 + 12;
	__u32 mtu = mtu_of(skb);
	if (ip->len + fixed > mtu) {
		count(C_TOO_BIG);
		return TC_ACT_OK;
	}
	__u32 rhc = max_hops & 0xff;
	__u8 mbit = 0;
	if (md) {
		if (ip->len + fixed + meta > mtu) {
			mbit = 1;
			meta = 0;
		} else if (rhc == 0) {
			meta = 0;
		} else {
			rhc -= 1;
		}
	}
	meta &= 127;
	// The MD header (§"INT-MD Metadata Header Format"): Ver 2, M, Hop ML, RHC, instructions; or
	// the MX header (§"INT-MX Header Format"): Ver 2, instructions.
	__u32 w0 = md ? ((2u << 28) | ((__u32)mbit << 25) | ((hop_ml & 0x1f) << 8) | rhc)
		      : (2u << 28);
	struct hop m;
	measure(skb, &m);
	if (npt != 2) {
		int v = insert_after_l4(skb, ip, s, &m, npt, l4_len, w0, meta, dport);
		if (v >= 0)
			return v;
	} else {
		int v = insert_udp(skb, ip, s, &m, w0, meta, sport, dport);
		if (v >= 0)
			return v;
	}
	// INT-MX carries no metadata by design: inserted all the same.
	count(meta || !md ? C_INSERTED : C_INSERTED_M);
	if (!md && report_due(ip, ip->proto, l4h, m.out_ns, m.in_if, m.out_if,
			      m.latency >> latency_shift))
		emit(skb, K_MX, &m);
	return TC_ACT_OK;
}

// The ports of the original L4 header of the flow with INT block `b`: zeros where the packet
// ends before them (NPT 2: behind the block; NPT 1: the destination port from the shim).
static __always_inline void flow_ports(struct __sk_buff *skb, const struct ip *ip,
				       const struct block *b, __u8 *ports)
{
	if (b->npt != 2) {
		__builtin_memcpy(ports, b->hdr, 4);
		if (b->npt == 1)
			__builtin_memcpy(&ports[2], &b->hdr[10], 2);
		return;
	}
	if (bpf_skb_load_bytes(skb, ip->l4 + 8 + b->len, ports, 4))
		__builtin_memset(ports, 0, 4);
}

// INT v2.1 §"INT Transit Hop Node": push this hop's metadata (Hop ML words, as the packet's
// instructions ask) on top of the stack and decrement the Remaining Hop Count; with RHC 0 set
// the E bit and push nothing; without room under the MTU set the M bit and push nothing.
// INT-MX: nothing changes in the packet; userspace reports this hop's metadata.
static __always_inline int transit(struct __sk_buff *skb, const struct ip *ip, struct scratch *s)
{
	struct block b;
	int f = find_int(skb, ip, &b, 1);
	if (f == 0)
		count(C_NOT_INT);
	if (f <= 0)
		return TC_ACT_OK;
	struct hop m;
	measure(skb, &m);
	__u32 ds_id = ((__u32)b.hdr[18] << 8) | b.hdr[19];
	__u32 *flags_set = ds_id ? bpf_map_lookup_elem(&ds_flags_set, &ds_id) : 0;
	if ((b.hdr[8] >> 4) == 3) {
		// INT-MX: the DS Flags of a known domain (the MX header's last word), nothing else.
		if (flags_set && (*flags_set & ~(((__u32)b.hdr[22] << 8) | b.hdr[23])) & 0xffff) {
			__u16 old, new;
			__builtin_memcpy(&old, &b.hdr[22], 2);
			new = bpf_htons((((__u16)b.hdr[22] << 8) | b.hdr[23]) | (__u16)*flags_set);
			__u32 at = b.shim_at + 4 + 10;
			if (b.npt == 2 ? bpf_skb_store_bytes(skb, at, &new, 2, 0)
				       : csum_field(skb, ip, at, old, new)) {
				count(C_DROP_HELPER);
				return TC_ACT_SHOT;
			}
		}
		count(C_MX_SEEN);
		__u8 ports[4];
		flow_ports(skb, ip, &b, ports);
		if (report_due(ip, b.proto, ports, m.out_ns, m.in_if, m.out_if,
			       m.latency >> latency_shift))
			emit(skb, K_MX, &m);
		return TC_ACT_OK;
	}
	__u32 ml = b.hdr[14] & 0x1f;
	__u32 rhc = b.hdr[15];
	__u32 instr = ((__u32)b.hdr[16] << 8) | b.hdr[17];
	__u32 meta = ml * 4;
	__u8 *h = s->hdr;
	__builtin_memcpy(h, b.hdr, 24);
	// A known domain (its DS Instruction's metadata as long as the words past the baseline):
	// its DS Flags set, its export metadata pushed before the Checksum Complement.
	__u32 base = baseline_bytes(instr);
	__u32 ds_len = meta > base ? meta - base : 0;
	const struct ds_export *ds = 0;
	if (flags_set) {
		__u32 key = (ds_id << 16) | ((__u32)b.hdr[20] << 8) | b.hdr[21];
		ds = bpf_map_lookup_elem(&ds_exports, &key);
		if (ds && ds->len != ds_len)
			ds = 0;
		if (ds) {
			h[22] |= *flags_set >> 8;
			h[23] |= *flags_set & 0xff;
		}
	}
	__u32 outcome;
	if (rhc == 0) {
		h[12] |= 0x04; // E
		meta = 0;
		outcome = C_HOP_LIMIT;
	} else if (ip->len + meta > mtu_of(skb)) {
		h[12] |= 0x02; // M
		meta = 0;
		outcome = C_MTU;
	} else if (meta == 0 || b.hdr[9] + ml > 255) {
		count(C_MALFORMED);
		return TC_ACT_OK;
	} else {
		h[15] = rhc - 1;
		h[9] = b.hdr[9] + ml;
		outcome = C_ADDED;
	}
	meta &= 127;
	if (meta) {
		encode(s->meta, instr, ml, &m);
		if (ds)
			put_domain(s->meta, base - ((instr & 1) ? 4 : 0), ds);
	}
	if (b.npt != 2) {
		// Behind the L4 header: the stack and all after it move towards the tail; the L4
		// checksum follows the header words that changed and the metadata that came in.
		if (skb->gso_size) {
			// A GSO packet (UDP forwarded as one by GRO): its segments' blocks are inside.
			count(C_UNSUPPORTED_INT);
			return TC_ACT_OK;
		}
		__s64 sum = bpf_csum_diff((__be32 *)&b.hdr[8], 16, (__be32 *)&h[8], 16, 0);
		if (meta)
			sum = bpf_csum_diff(0, 0, (__be32 *)s->meta, meta, sum);
		if (sum < 0) {
			count(C_DROP_HELPER);
			return TC_ACT_SHOT;
		}
		__u32 at = b.shim_at + 16, old = l4_bytes(ip);
		if (meta) {
			int v = move_verdict(open_gap(skb, at, meta, s));
			if (v >= 0)
				return v;
		}
		if (bpf_skb_store_bytes(skb, b.shim_at, &h[8], 16, 0) ||
		    (meta && bpf_skb_store_bytes(skb, at, s->meta, SIZE(meta), 0)) ||
		    csum_bytes(skb, ip, sum) ||
		    (meta && (l4_resize(skb, ip, old, old + meta) || fix_ip(skb, ip, meta, 0, 0)))) {
			count(C_DROP_HELPER);
			return TC_ACT_SHOT;
		}
		count(outcome);
		return TC_ACT_OK;
	}
	if (meta) {
		__u16 ulen = bpf_htons((((__u16)b.hdr[4] << 8) | b.hdr[5]) + meta);
		__builtin_memcpy(&h[4], &ulen, 2);
		if (bpf_skb_adjust_room(skb, meta, BPF_ADJ_ROOM_NET, 0)) {
			count(C_ADJUST_FAILED);
			return TC_ACT_OK;
		}
	}
	// The UDP header, shim and MD header move to the front of the room; the metadata goes
	// between them and the stack below.
	if (bpf_skb_store_bytes(skb, ip->l4, h, 24, 0) ||
	    (meta && bpf_skb_store_bytes(skb, ip->l4 + 24, s->meta, SIZE(meta), 0)) ||
	    (meta && fix_ip(skb, ip, meta, 0, 0))) {
		count(C_DROP_HELPER);
		return TC_ACT_SHOT;
	}
	count(outcome);
	return TC_ACT_OK;
}

// INT v2.1 §"INT Sink Node": report the stack (userspace, from the event) and remove the INT
// block, restoring the original packet byte for byte but for what routers change (TTL): NPT 2
// removes the block's UDP header too and gives the IP header back the original protocol; NPT
// 1 gives the UDP header back its destination port, NPT 0 the IP header its DSCP
// (`restore_dscp`: "Restoring the original value is optional").
// A sink's INT-MD report is about the stack's hops: a summary of their node IDs and
// interfaces (`path`) and of their hop latencies, each in steps of minFlowHopLatencyChangeNs
// (`latency`), of the newest STACK_BYTES of the stack (16 hops of 4 words), so that the flow
// filter lets a report through when any hop's ports or latency changed. 0 for what the
// instructions do not carry.
static __always_inline void stack_summary(struct __sk_buff *skb, const struct block *b,
					  struct scratch *s, __u32 *path, __u32 *latency)
{
	*path = 0;
	*latency = 0;
	__u32 instr = ((__u32)b->hdr[16] << 8) | b->hdr[17];
	__u32 ml = b->hdr[14] & 0x1f;
	__u32 len = b->len - 16; // the shim's words after the MD header: the stack
	if (!ml || !len || (instr & 0xe000) == 0)
		return;
	if (len > STACK_BYTES)
		len = STACK_BYTES;
	if (bpf_skb_load_bytes(skb, b->shim_at + 16, s->stack,
			       (((len - 1) & (STACK_BYTES - 1)) + 1)))
		return;
	__u32 words = len / 4;
	__u32 has_id = (instr >> 15) & 1, has_ports = (instr >> 14) & 1, has_lat = (instr >> 13) & 1;
	__u32 ports_at = has_id, lat_at = has_id + has_ports;
	__u64 p = 0, l = 0;
	for (int h = 0; h < STACK_BYTES / 16; h++) {
		__u32 at = h * ml;
		if (at + ml > words)
			break;
		if (has_id)
			p = mix(p ^ s->stack[at & (STACK_BYTES / 4 - 1)] ^ h);
		if (has_ports)
			p = mix(p ^ ((__u64)s->stack[(at + ports_at) & (STACK_BYTES / 4 - 1)] << 32));
		if (has_lat)
			l = mix(l ^ (bpf_ntohl(s->stack[(at + lat_at) & (STACK_BYTES / 4 - 1)]) >>
				     latency_shift) ^ ((__u64)h << 40));
	}
	*path = (__u32)(p ^ (p >> 32));
	*latency = (__u32)(l ^ (l >> 32));
}

// The sink's removal behind the L4 header (NPT 0/1): the block's bytes leave the L4 checksum
// (summed MOVE_CHUNK at a time), the bytes behind it move up. -1: removed; else the verdict.
static __always_inline int remove_after_l4(struct __sk_buff *skb, const struct ip *ip,
					   const struct block *b, struct scratch *s)
{
	if (skb->gso_size) {
		// A GRO super-packet: its segments' INT blocks are inside it, not at the front.
		count(C_UNSUPPORTED_INT);
		return TC_ACT_OK;
	}
	__u32 n = b->len & 0x7fc; // at most 4 + 255 * 4
	__s64 sum = 0;
	for (int i = 0; i < 3; i++) {
		__u32 done = i * MOVE_CHUNK;
		if (done >= n)
			break;
		__u32 c = n - done;
		if (c > MOVE_CHUNK)
			c = MOVE_CHUNK;
		c = (((c - 1) & (MOVE_CHUNK - 1)) + 1) & ~3U;
		if (!c || bpf_skb_load_bytes(skb, b->shim_at + done, s->move, c)) {
			count(C_MALFORMED);
			return TC_ACT_OK;
		}
		sum = bpf_csum_diff((__be32 *)s->move, c, 0, 0, sum);
	}
	if (sum < 0) {
		count(C_MALFORMED);
		return TC_ACT_OK;
	}
	__u32 old = l4_bytes(ip);
	__u16 port;
	__builtin_memcpy(&port, &b->hdr[10], 2);
	int v = move_verdict(close_gap(skb, b->shim_at, n, s));
	if (v >= 0)
		return v;
	if (csum_bytes(skb, ip, sum) || l4_resize(skb, ip, old, old - n) ||
	    (b->npt == 1 && csum_field(skb, ip, ip->l4 + 2, bpf_htons(int_port), port)) ||
	    fix_ip(skb, ip, -(int)n, 0, 0) ||
	    (b->npt == 0 && restore_dscp && set_dscp(skb, ip, b->hdr[11] >> 2))) {
		count(C_DROP_HELPER);
		return TC_ACT_SHOT;
	}
	return -1;
}

// Whether the kernel will forward the packet, `len` bytes of IP once INT is out (a route out of
// this host, not one of its addresses), as the FIB says now.
static __always_inline int forwarded(struct __sk_buff *skb, const struct ip *ip, __u32 len)
{
	struct bpf_fib_lookup f = {};
	f.ifindex = skb->ifindex;
	f.l4_protocol = ip->proto;
	f.tot_len = len;
	if (ip->v6) {
		f.family = 10; // AF_INET6
		__builtin_memcpy(f.ipv6_src, ip->addr, 16);
		__builtin_memcpy(f.ipv6_dst, &ip->addr[16], 16);
	} else {
		f.family = 2; // AF_INET
		__builtin_memcpy(&f.ipv4_src, &ip->addr[12], 4);
		__builtin_memcpy(&f.ipv4_dst, &ip->addr[28], 4);
	}
	long r = bpf_fib_lookup(skb, &f, sizeof(f), 0);
	return r == BPF_FIB_LKUP_RET_SUCCESS || r == BPF_FIB_LKUP_RET_NO_NEIGH ||
	       r == BPF_FIB_LKUP_RET_FRAG_NEEDED;
}

// The sink's report in `s->ev` put in `pending` until its packet, `ip_len` bytes of IP once INT
// is out, leaves (on_xmit). 0: not deferred (no arrival time; `pending` full, or the same key
// waiting: counted).
static __always_inline int defer(struct __sk_buff *skb, const struct ip *ip, struct scratch *s,
				 __u32 ip_len)
{
	struct pending_key k = {.tstamp = skb->tstamp, .ip_len = ip_len, .ident = ip->ident};
	if (!k.tstamp || skb->tstamp_type != BPF_SKB_CLOCK_MONOTONIC)
		return 0;
	if (bpf_map_update_elem(&pending, &k, &s->ev, BPF_NOEXIST)) {
		count(C_PENDING_FULL);
		return 0;
	}
	__u64 *held = pending_slot(HELD_BY_KERNEL);
	if (held)
		__sync_fetch_and_add(held, 1);
	count(C_DEFERRED);
	return 1;
}

// Event `v` (a copy) handed to userspace now.
static __always_inline void send_copy(const struct event *v)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(C_RING_FULL);
		return;
	}
	__builtin_memcpy(e, v, sizeof(*e));
	submit(e);
	count(C_EVENTS);
}

static __always_inline int sink(struct __sk_buff *skb, const struct ip *ip, struct scratch *s)
{
	struct block b;
	int f = find_int(skb, ip, &b, 1);
	if (f == 0)
		count(C_NOT_INT);
	if (f <= 0)
		return TC_ACT_OK;
	// At ingress: the hop's egress (and so its latency and queue) is not known yet; a packet
	// the host forwards gets them where it leaves (`pending`).
	struct hop m = {
		.in_ns = skb->tstamp ? skb->tstamp : bpf_ktime_get_ns(),
		.in_if = skb->ifindex,
		.latency = ~0U,
		.queue = ~0U,
	};
	m.out_ns = m.in_ns;
	int mx = (b.hdr[8] >> 4) == 3;
	// INT-MX: the sink reports itself (at ingress: its interface, no latency); INT-MD: the stack.
	__u32 path = 0, latency = m.latency >> latency_shift;
	if (!mx)
		stack_summary(skb, &b, s, &path, &latency);
	__u8 ports[4];
	flow_ports(skb, ip, &b, ports);
	// The report is of the packet as it came, INT in it; it waits for the packet's egress only
	// once INT is out, the packet not discarded, and the host forwards it.
	int due = report_due(ip, b.proto, ports, m.in_ns, m.in_if, path, latency);
	if (due)
		fill(&s->ev, skb, mx ? K_MX_SINK : K_SINK, &m);
	__u32 removed = b.npt == 2 ? 8 + b.len : b.len;
	int v = -1;
	if (b.npt != 2) {
		v = remove_after_l4(skb, ip, &b, s);
	} else if (b.proto != IPPROTO_TCP && b.proto != IPPROTO_UDP) {
		count(C_MALFORMED);
		v = TC_ACT_OK;
	} else if (bpf_skb_adjust_room(skb, -(__s32)(removed & 0x7ff), BPF_ADJ_ROOM_NET, 0)) {
		count(C_ADJUST_FAILED);
		v = TC_ACT_OK;
	} else if (fix_ip(skb, ip, -(int)(removed & 0x7ff), IPPROTO_UDP, b.proto)) {
		count(C_DROP_HELPER);
		v = TC_ACT_SHOT;
	}
	// D bit (INT v2.1 §"INT Applied to Synthetic Traffic"): reported, then discarded.
	int discard = v < 0 && (b.hdr[12] & 0x08);
	if (due && (v >= 0 || discard || !forwarded(skb, ip, ip->len - removed) ||
		    !defer(skb, ip, s, ip->len - removed)))
		send_copy(&s->ev);
	if (v >= 0)
		return v;
	if (discard) {
		count(C_DROP_DISCARD);
		return TC_ACT_SHOT;
	}
	count(C_SUNK);
	return TC_ACT_OK;
}

SEC("classifier")
int int_egress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	__u32 *role = bpf_map_lookup_elem(&roles, &ifindex);
	if (!role)
		return TC_ACT_OK;
	count(C_SEEN);
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return TC_ACT_OK;
	struct ip ip;
	int p = parse_ip(skb, &ip);
	if (p == 0)
		count(C_NOT_IP);
	if (p == -1 && *role == ROLE_SOURCE && encap == ENC_DSCP && dscp_marks_int(ip.dscp) &&
	    remark_on) {
		// ICMP, IPv4 with options …: no INT goes in, but INT's marking must not go on either
		// (INT v2.1 §"INT over TCP/UDP"). Fragments pass as they came, as the node's do.
		if (remark(skb, &ip))
			return TC_ACT_SHOT;
	}
	if (p <= 0)
		return TC_ACT_OK;
	int verdict;
	switch (*role) {
	case ROLE_SOURCE:
		verdict = source(skb, &ip, s);
		break;
	case ROLE_TRANSIT:
		verdict = transit(skb, &ip, s);
		break;
	default:
		verdict = TC_ACT_OK;
		count(C_NOT_INT);
	}
	// The queue's sojourn is measured from here to the driver (on_xmit), for forwarded packets
	// (a local socket's departure time, TCP's EDT, is left alone).
	if (verdict == TC_ACT_OK && skb->ingress_ifindex)
		bpf_skb_set_tstamp(skb, bpf_ktime_get_ns(), BPF_SKB_CLOCK_MONOTONIC);
	return verdict;
}

// Every watched interface's ingress: the arrival time; a sink interface's: INT removed here,
// before the routing decision, so that the packet is judged by the MTU past the INT domain at
// its own size (at tc egress the kernel would already have refused it: IPv6 routers never
// fragment, and an IPv4 packet with DF set would be dropped too).
static __always_inline int ingress(struct __sk_buff *skb)
{
	__u16 proto = bpf_ntohs(skb->protocol);
	if (proto != ETH_P_IP && proto != ETH_P_IPV6)
		return TC_ACT_OK;
	if (!bpf_skb_set_tstamp(skb, bpf_ktime_get_ns(), BPF_SKB_CLOCK_MONOTONIC))
		count(C_STAMPED);
	__u32 ifindex = skb->ifindex;
	__u32 *role = bpf_map_lookup_elem(&roles, &ifindex);
	if (!role || *role != ROLE_SINK)
		return TC_ACT_OK;
	count(C_SEEN);
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return TC_ACT_OK;
	struct ip ip;
	int p = parse_ip(skb, &ip);
	if (p == 0)
		count(C_NOT_IP);
	if (p <= 0)
		return TC_ACT_OK;
	return sink(skb, &ip, s);
}

// A packet it lets through goes on to the next program at this hook (TCX_NEXT, or a classic
// filter's TC_ACT_UNSPEC), not straight up the stack: the ingress hook only stamps and strips,
// so it leaves the verdict to whatever else is attached, such as the lab's silent loss.
SEC("classifier")
int int_ingress(struct __sk_buff *skb)
{
	int verdict = ingress(skb);
	return verdict == TC_ACT_OK ? TC_ACT_NEXT : verdict;
}

// A sink's report waiting for this packet (`pending`): sent with the interface it leaves by, the
// time from its arrival to now (its hop latency, the qdisc included) and the root qdisc's
// backlog. An entry userspace took meanwhile is not sent twice.
static __always_inline void egress_of_pending(struct sk_buff *skb, const struct net_device *dev)
{
	__u64 ts = skb->tstamp;
	__u16 nh = skb->network_header;
	if (!ts || nh == 0xffff)
		return;
	__u8 h[8];
	if (bpf_probe_read_kernel(h, sizeof(h), skb->head + nh))
		return;
	struct pending_key k = {.tstamp = ts};
	__u16 proto = bpf_ntohs(skb->protocol);
	if (proto == ETH_P_IP && (h[0] >> 4) == 4) {
		k.ip_len = ((__u32)h[2] << 8) | h[3];
		k.ident = ip_ident(h, 0);
	} else if (proto == ETH_P_IPV6 && (h[0] >> 4) == 6) {
		k.ip_len = 40 + (((__u32)h[4] << 8) | h[5]);
		k.ident = ip_ident(h, 1);
	} else {
		return;
	}
	struct event *v = bpf_map_lookup_elem(&pending, &k);
	if (!v)
		return;
	__u64 *n = pending_slot(HELD_BY_KERNEL);
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		if (!bpf_map_delete_elem(&pending, &k)) {
			count(C_DEFER_LOST);
			if (n)
				__sync_fetch_and_add(n, -1);
		}
		return;
	}
	__builtin_memcpy(e, v, sizeof(*e));
	__u64 now = bpf_ktime_get_ns();
	e->flags |= F_EGRESS | F_QUEUE;
	e->egress_if = dev->ifindex;
	e->egress_ns = now;
	__u64 l = now > e->ingress_ns ? now - e->ingress_ns : 0;
	e->latency_ns = l >= 0xffffffffULL ? 0xfffffffe : (__u32)l;
	struct Qdisc *qd = dev->qdisc;
	e->backlog = qd ? qd->qstats.backlog : 0;
	e->queue_id = skb->queue_mapping;
	if (bpf_map_delete_elem(&pending, &k)) {
		bpf_ringbuf_discard(e, BPF_RB_NO_WAKEUP);
		return;
	}
	if (n)
		__sync_fetch_and_add(n, -1);
	submit(e);
	count(C_DEFER_SENT);
}

SEC("tp_btf/net_dev_start_xmit")
int on_xmit(u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	const struct net_device *dev = (const struct net_device *)ctx[1];
	if (!dev || dev->nd_net.net->ns.inum != netns_inum)
		return 0;
	__u32 ifindex = dev->ifindex;
	if (any_pending())
		egress_of_pending(skb, dev);
	if (!bpf_map_lookup_elem(&roles, &ifindex))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 ts = skb->tstamp;
	__u32 slot = ifindex & (QUEUE_SLOTS - 1);
	struct queue_state *q = bpf_map_lookup_elem(&queues, &slot);
	if (!q)
		return 0;
	__u32 backlog = 0;
	struct Qdisc *qd = dev->qdisc;
	if (qd)
		backlog = qd->qstats.backlog;
	q->ifindex = ifindex;
	q->at = now;
	q->backlog = backlog;
	q->sojourn_ns = (ts && ts <= now && now - ts < MAX_SOJOURN_NS) ? (__u32)(now - ts) : 0;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

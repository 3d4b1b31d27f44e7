// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// SD-Fabric's flow report filter, in the kernel (shared/spec/sd-fabric-int.txt, "Smart
// filters and triggers"): "For flow reports and drop reports, the pipeline generates 1
// report/sec for each 5-tuple, or more when detecting anomalies (e.g., changes in the
// ingress/egress port, queues, hop latency, etc)"; "the switch will generate a report
// immediately if the latency difference between this packet and the previous one of the same
// 5-tuple is greater than minFlowHopLatencyChangeNs" ("The current implementation only
// supports powers of 2": the latency is compared in steps of that power of two). The same
// semantics as intscope_node::filter::ReportFilter
// (the userspace node's), included by agent.bpf.c (INT-XD postcards) and int.bpf.c (INT-MD/MX
// reports at the sink and at INT-MX hops), each with a table of its own.
//
// The table is direct-mapped (an array map, a slot per hash, the newest flow wins a
// collision): a lookup is an address computation, where a hash map's lookup and update cost
// more than the rest of a program. A collision costs an early report, never a missing one.
#ifndef INTSCOPE_FLOW_FILTER_H
#define INTSCOPE_FLOW_FILTER_H

// Settings, written by the loader before the programs load (constant-folded by the verifier).
const volatile __u64 interval_ns = 1000000000;
const volatile __u32 latency_shift = 8;      // log2(minFlowHopLatencyChangeNs)
const volatile __u32 filters_on = 1;         // the filter (0: every report is due)

// Aligned to 8 bytes: the BPF target has no unaligned loads, so clang copies and compares a
// key of byte alignment a byte at a time.
struct flow_key {
	__u8 src[16];        // IPv4 as ::ffff:a.b.c.d
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 node;           // index + 1 of the namespace that sees the flow
	__u8 pad[2];
} __attribute__((aligned(8)));

struct last_report {
	__u64 at;
	__u32 ingress_if;
	__u32 egress_if;
	__u32 latency_bucket;
	__u32 pad;
};

#define FLOW_SLOTS 65536

struct flow_slot {
	struct flow_key key;
	struct last_report last;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FLOW_SLOTS);
	__type(key, __u32);
	__type(value, struct flow_slot);
} flows SEC(".maps");

static __always_inline __u64 mix(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

static __always_inline __u64 rotl(__u64 x, int r)
{
	return (x << r) | (x >> (64 - r));
}

// A key's slot: its words rotated apart, so that the two directions of a flow (source and
// destination swapped) land in different slots, then one mix (a multiplication) rather than
// one per word.
static __always_inline __u32 flow_slot_of(const struct flow_key *k)
{
	__u64 w[5];
	__builtin_memcpy(w, k, sizeof(w));
	return mix(w[0] ^ rotl(w[1], 13) ^ rotl(w[2], 29) ^ rotl(w[3], 43) ^ rotl(w[4], 7)) &
	       (FLOW_SLOTS - 1);
}

static __always_inline int same_key(const struct flow_key *a, const struct flow_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4];
}

// Whether flow `k`'s report is due now, seen between interfaces `in_if` and `out_if` with its
// latency in `bucket` (a step of minFlowHopLatencyChangeNs, or any value that changes when
// the latencies to compare do); a due report is remembered as the flow's last.
static __always_inline int flow_due_bucket(const struct flow_key *k, __u64 now, __u32 in_if,
					   __u32 out_if, __u32 bucket)
{
	if (!filters_on)
		return 1;
	__u32 i = flow_slot_of(k);
	struct flow_slot *f = bpf_map_lookup_elem(&flows, &i);
	if (!f)
		return 1;
	struct last_report *l = &f->last;
	if (same_key(&f->key, k) && now - l->at < interval_ns && l->ingress_if == in_if &&
	    l->egress_if == out_if && l->latency_bucket == bucket)
		return 0;
	f->key = *k;
	l->at = now;
	l->ingress_if = in_if;
	l->egress_if = out_if;
	l->latency_bucket = bucket;
	return 1;
}

// Whether flow `k`'s report is due, its hop latency `latency` ns (SD-Fabric compares
// latency >> log2(minFlowHopLatencyChangeNs)).
static __always_inline int flow_due(const struct flow_key *k, __u64 now, __u32 in_if,
				    __u32 out_if, __u32 latency)
{
	return flow_due_bucket(k, now, in_if, out_if, latency >> latency_shift);
}

#endif

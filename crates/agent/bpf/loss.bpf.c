// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// A silent loss, for `intscope lab`: a share of the packets arriving on an interface vanish as
// if a bad cable had eaten them, with no drop any report of the kernel's can see. Attached as a
// classic cls_bpf filter at tc ingress (not TCX), because only there is TC_ACT_STOLEN honoured:
// the kernel then frees the packet with consume_skb(), which fires `skb:consume_skb`, not
// `skb:kfree_skb` (TCX maps TC_ACT_STOLEN to "next program", and TC_ACT_SHOT or XDP_DROP free
// it with kfree_skb(), which the agent reports as a drop). Classic filters run after the TCX
// programs, and the INT data path's pass on to them (TCX_NEXT), so the loss also works under it.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define TC_ACT_UNSPEC (-1)
#define TC_ACT_STOLEN 4

// A packet is lost when a random 32-bit draw is below this (share x 2^32); every packet when
// `lose_all` is set (a share of 1 does not fit 32 bits).
const volatile __u32 threshold = 0;
const volatile __u32 lose_all = 0;

// [0]: packets seen, [1]: packets lost (per CPU).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 k)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &k);
	if (c)
		*c += 1;
}

SEC("classifier")
int lose(struct __sk_buff *skb)
{
	count(0);
	if (lose_all || bpf_get_prandom_u32() < threshold) {
		count(1);
		return TC_ACT_STOLEN;
	}
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

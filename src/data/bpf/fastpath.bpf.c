/* fastpath.bpf.c -- the tcp fast path's verdict program: a segment read
 * from one end of a client-member pair is written to the other end by the
 * kernel (sockhash redirect), and counted; chashd keeps the routing, the
 * FINs, the closes and the bound on what the kernel may queue
 * (src/fastpath.c, fastpath_abi.h). Built with clang -target bpf, loaded
 * through libbpf, attached to the sockhash as its SK_SKB verdict.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <linux/bpf.h>

#include <bpf/bpf_helpers.h>

#include "fastpath_abi.h"

/* chashd sets the sizes at load (bpf_map__set_max_entries). */
struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    __uint(max_entries, 2);
    __type(key, __u32); /* FP_SOCK_KEY(pair, side) */
    __type(value, __u32);
} socks SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    __uint(max_entries, 2);
    __type(key, __u32); /* FP_SOCK_KEY(pair, side) */
    __type(value, __u32);
} holds SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 2);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u64); /* socket cookie */
    __type(value, struct fp_end);
} ends SEC(".maps");

/* One ring per worker (chashd sets the count and puts the rings in). */
struct ring {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, FP_RING_SIZE);
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
    __uint(max_entries, 1);
    __type(key, __u32);
    __array(values, struct ring);
} rings SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __uint(map_flags, BPF_F_MMAPABLE);
    __type(key, __u32);
    __type(value, struct fp_pair);
} pairs SEC(".maps");

/* chashd writes these while the program runs: read each once. */
#define READ_ONCE(x) (*(volatile __u64 *)&(x))

/* Wake the pair's worker: its slot into the worker's ring. */
static void
note(struct fp_end *e, __u32 slot)
{
    __u32 worker = e->worker;
    void *ring = bpf_map_lookup_elem(&rings, &worker);

    if (ring != NULL)
        bpf_ringbuf_output(ring, &slot, sizeof(slot), BPF_RB_FORCE_WAKEUP);
}

/* Attached as BPF_SK_SKB_VERDICT (libbpf 1.1 knows no section name for
 * it: the attach type is given at attach time). */
SEC("sk_skb")
int
fastpath_verdict(struct __sk_buff *skb)
{
    __u64 cookie = bpf_get_socket_cookie(skb);
    struct fp_end *e = bpf_map_lookup_elem(&ends, &cookie);
    struct fp_pair *p;
    __u32 slot, side, peer, len = skb->len;
    __u64 passed;

    /* Not a pair's (should not happen): chashd reads it. */
    if (e == NULL)
        return SK_PASS;
    /* A FIN's own segment carries no byte: nothing to move, and chashd
     * passes the FIN on itself, after the last byte. Sent after that
     * shutdown(2), it would fail the peer (EPIPE). */
    if (len == 0)
        return SK_DROP;
    slot = e->pair;
    side = e->side & 1;
    p = bpf_map_lookup_elem(&pairs, &slot);
    if (p == NULL)
        return SK_PASS;
    passed = p->passed[side];
    if (passed == READ_ONCE(p->consumed[side]) &&
        p->redirected[side] + len <= READ_ONCE(p->limit[side])) {
        peer = FP_SOCK_KEY(slot, side ^ 1);
        if (bpf_sk_redirect_hash(skb, &holds, &peer, 0) == SK_PASS) {
            __u64 red = p->redirected[side] + len;
            __u64 at = READ_ONCE(p->note[side]);

            p->redirected[side] = red;
            if (red >= at && p->noted[side] != at) {
                p->noted[side] = at;
                note(e, slot);
            }
            return SK_PASS;
        }
        /* The peer left `holds` (it is closing): chashd sees to it. */
    }
    /* chashd's from here: the first segment wakes it, and then each
     * FP_NOTE_LEFT that piles up unread. */
    {
        __u64 left = passed - READ_ONCE(p->consumed[side]);

        if (left == 0 || left / FP_NOTE_LEFT != (left + len) / FP_NOTE_LEFT)
            note(e, slot);
    }
    p->passed[side] = passed + len;
    return SK_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

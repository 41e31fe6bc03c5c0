/* fastpath_abi.h -- what the tcp fast path's BPF program (fastpath.bpf.c)
 * and chashd (src/fastpath.c) share: the layout of the maps through which
 * they talk. Included by both, so it uses the kernel's __u32/__u64 types.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_FASTPATH_ABI_H
#define CHASHD_FASTPATH_ABI_H

#include <linux/types.h>

/* A pair's two ends: bytes read from one are written to the other. */
#define FP_CLIENT 0
#define FP_MEMBER 1

/* The sockhash key of end <side> of pair slot <pair>. */
#define FP_SOCK_KEY(pair, side) ((pair)*2 + (side))

/*
 * Two sockhashes hold a pair's ends, both keyed by FP_SOCK_KEY:
 * - `socks`, with the verdict program: the ends whose input the kernel
 *   moves. An end stays there for the pair's life: taken out while bytes
 *   come, a segment the program is handling on another CPU is dropped
 *   (its program pointer is cleared before the socket's data_ready is
 *   given back) -- seen, as downloads that stalled short of their end.
 * - `holds`, with no program: every end; the program redirects to the
 *   peer found here.
 *
 * `ends` (hash): a socket's cookie -> its pair slot, side and worker.
 * Written by chashd when a pair enters the fast path, deleted when it
 * closes.
 */
struct fp_end {
    __u32 pair;
    __u32 side;
    __u32 worker; /* the owner: whose ring gets the pair's notes */
};

/*
 * `pairs` (a memory-mapped array, one slot per pair), per direction i
 * (bytes read from end i, written to end 1 - i). Each field has one
 * writer: the program writes redirected, passed and noted (one CPU at a
 * time: a socket's input runs under its lock), chashd writes consumed,
 * limit and note.
 *
 * The program moves a segment to the peer while (a) chashd holds none of
 * the direction's bytes, passed[i] == consumed[i] -- nothing of chashd's
 * can then come after it on the wire -- and (b) redirected[i] stays
 * within limit[i], the bound on what the kernel may queue for a peer that
 * does not take it (chashd raises it as the peer takes bytes). Otherwise
 * it leaves the segment in the socket (SK_PASS): charged to its receive
 * buffer, so TCP's window stops the sender once chashd does not read --
 * the back-pressure the redirect itself lacks. From then on the direction
 * is chashd's: it writes what was left, after the kernel's queue, and the
 * program takes the direction back at the first segment that comes once
 * consumed[i] has caught up with passed[i].
 *
 * Notes: the first segment left to chashd, and each time redirected[i]
 * reaches note[i], the program puts the pair's slot into its worker's
 * ring (`rings`), which wakes that worker. No other segment wakes chashd.
 */
struct fp_pair {
    __u64 redirected[2]; /* program: written to the other end */
    __u64 passed[2];     /* program: left to chashd */
    __u64 consumed[2];   /* chashd: of passed[i], written to the other end */
    __u64 limit[2];      /* chashd: redirected[i] may grow to this */
    __u64 note[2];       /* chashd: note when redirected[i] reaches it */
    __u64 noted[2];      /* program: the last note it sent */
    __u64 spare[4];      /* 128 bytes: two cache lines of its own */
};

/* The program notes each FP_NOTE_LEFT bytes it leaves to chashd that
 * chashd has not taken yet: chashd closes a pair whose peer lets them
 * pile up (fastpath.h, FASTPATH_HARD). */
#define FP_NOTE_LEFT (1024 * 1024)

/* A worker's ring: records of one __u32, the pair's slot. */
#define FP_RING_SIZE 4096

#endif /* CHASHD_FASTPATH_ABI_H */

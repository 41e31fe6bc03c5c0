/* fastpath.c -- the tcp fast path's loader and pair slots: the BPF object
 * built from src/data/bpf/fastpath.bpf.c is embedded in chashd and loaded
 * through libbpf at start; each worker owns a range of the `pairs` map's
 * slots and sweeps its pairs to fold the kernel's counters. Without clang
 * and libbpf at build time this file builds the stubs only (CHASH_FASTPATH
 * unset): fastpath_init says why, and every pool splices in user space.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "data/fastpath.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CHASH_FASTPATH
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "base/invariant.h"
#include "base/log.h"
#include "data/bpf/fastpath_abi.h"

_Static_assert(FP_CLIENT == FASTPATH_CLIENT && FP_MEMBER == FASTPATH_MEMBER,
               "the sides agree with the program's");
_Static_assert(sizeof(struct fp_pair) == 128, "a pair is two cache lines");

/* The object built by the Makefile from src/data/bpf/fastpath.bpf.c. */
extern const unsigned char fastpath_bpf_obj[];
extern const size_t fastpath_bpf_obj_len;

/* Pairs in the fast path at once, over all workers (each takes its share
 * of the slots): 128 bytes each in the `pairs` map, two sockets each in
 * the sockhash. A pair that finds no slot splices in user space. */
#define FASTPATH_PAIRS 65536

/* How often a worker folds its pairs' counters into the stats (the
 * admin API and /metrics lag the kernel by this much at most) and raises
 * the bounds of the directions that are using theirs. */
#define FASTPATH_SWEEP_MS 100

/* One worker's slots, pairs and ring. Set up by the control thread at
 * init; touched by that worker only afterwards. */
struct fp_worker {
    uint32_t *free; /* stack of free slots */
    uint32_t nfree;
    bool filled;                    /* <free> holds the worker's range */
    struct fastpath_pair pairs;     /* list head (prev/next only) */
    struct fastpath_pair **by_slot; /* [per_worker]: the pair in a slot */
    struct timer sweep;             /* armed while <pairs> is not empty */
    struct worker *w;
    /* its ring (fastpath_abi.h): the program's notes, read in place */
    struct ev ring_ev;
    int ring;                     /* the ring map, in the worker's epoll */
    unsigned long *ring_consumer; /* page 0, ours to write */
    const unsigned long *ring_producer; /* page 1, the kernel's */
    const char *ring_data;              /* FP_RING_SIZE bytes, mapped twice */
};

static struct {
    _Atomic bool ready; /* written once by the control thread */
    struct bpf_object *obj;
    int socks, holds, ends; /* map descriptors */
    struct fp_pair *pairs;  /* the `pairs` map, mapped */
    size_t pairs_len;
    uint32_t per_worker; /* slots per worker */
    unsigned nworkers;
    struct fp_worker *workers;
    char libbpf_msg[256]; /* libbpf's last warning, for <why> */
} fp = {.socks = -1, .holds = -1, .ends = -1};

/* libbpf prints nothing of its own: its last warning goes into why the
 * fast path is off, the rest to the debug log. */
static int __attribute__((format(printf, 2, 0)))
libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    char line[256];
    size_t n;

    vsnprintf(line, sizeof(line), fmt, ap);
    n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    if (level == LIBBPF_WARN)
        snprintf(fp.libbpf_msg, sizeof(fp.libbpf_msg), "%s", line);
    if (level != LIBBPF_DEBUG)
        log_debug("fast path: libbpf: %s", line);
    return 0;
}

static uint64_t
load64(const __u64 *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void
store64(__u64 *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/* Map worker <fw>'s ring: its consumer page to write, its producer page
 * and data (twice, so a record that wraps reads in one piece) to read. */
static int
ring_map(struct fp_worker *fw)
{
    long pg = sysconf(_SC_PAGESIZE);
    void *c, *p;

    c = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED, fw->ring, 0);
    if (c == MAP_FAILED)
        return -1;
    p = mmap(NULL, (size_t)pg + 2 * FP_RING_SIZE, PROT_READ, MAP_SHARED,
             fw->ring, pg);
    if (p == MAP_FAILED) {
        munmap(c, (size_t)pg);
        return -1;
    }
    fw->ring_consumer = c;
    fw->ring_producer = p;
    fw->ring_data = (const char *)p + pg;
    return 0;
}

static int
set_size(const char *map, uint32_t n, char *why, size_t whylen)
{
    struct bpf_map *m = bpf_object__find_map_by_name(fp.obj, map);

    if (m == NULL || bpf_map__set_max_entries(m, n) < 0) {
        snprintf(why, whylen, "the program has no map '%s'", map);
        return -1;
    }
    return 0;
}

static int
map_fd(const char *map)
{
    struct bpf_map *m = bpf_object__find_map_by_name(fp.obj, map);

    return m != NULL ? bpf_map__fd(m) : -1;
}

/* Open the embedded object, size its maps for <workers> and load it into
 * the kernel. 0, or -1 with <why> (fp.obj may be left open). */
static int
object_load(unsigned workers, char *why, size_t whylen)
{
    LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = "chashd_fastpath");
    int err;

    libbpf_set_print(libbpf_print);
    fp.obj =
        bpf_object__open_mem(fastpath_bpf_obj, fastpath_bpf_obj_len, &opts);
    if (fp.obj == NULL) {
        snprintf(why, whylen, "libbpf cannot open the program: %s",
                 strerror(errno));
        return -1;
    }
    if (set_size("socks", 2 * FASTPATH_PAIRS, why, whylen) < 0 ||
        set_size("holds", 2 * FASTPATH_PAIRS, why, whylen) < 0 ||
        set_size("ends", 2 * FASTPATH_PAIRS, why, whylen) < 0 ||
        set_size("pairs", FASTPATH_PAIRS, why, whylen) < 0 ||
        set_size("rings", workers, why, whylen) < 0)
        return -1;
    err = bpf_object__load(fp.obj);
    if (err < 0) {
        if (err == -EPERM || err == -EACCES)
            snprintf(why, whylen,
                     "no privilege to load BPF programs (root, or "
                     "CAP_BPF and CAP_NET_ADMIN)");
        else
            snprintf(why, whylen, "the kernel refused the program: %s%s%s",
                     strerror(-err), fp.libbpf_msg[0] ? ": " : "",
                     fp.libbpf_msg);
        return -1;
    }
    return 0;
}

/* The loaded object's maps (fp.socks, fp.holds, fp.ends; *<pairs_fd>,
 * *<rings_fd>) and its verdict program, attached to `socks`. 0, or -1
 * with <why>. */
static int
object_attach(int *pairs_fd, int *rings_fd, char *why, size_t whylen)
{
    struct bpf_program *prog =
        bpf_object__find_program_by_name(fp.obj, "fastpath_verdict");

    fp.socks = map_fd("socks");
    fp.holds = map_fd("holds");
    fp.ends = map_fd("ends");
    *pairs_fd = map_fd("pairs");
    *rings_fd = map_fd("rings");
    if (prog == NULL || fp.socks < 0 || fp.holds < 0 || fp.ends < 0 ||
        *pairs_fd < 0 || *rings_fd < 0) {
        snprintf(why, whylen, "the program lacks its maps");
        return -1;
    }
    if (bpf_prog_attach(bpf_program__fd(prog), fp.socks, BPF_SK_SKB_VERDICT,
                        0) < 0) {
        snprintf(why, whylen,
                 "the kernel refused the verdict program on a sockhash: %s",
                 strerror(errno));
        return -1;
    }
    return 0;
}

/* Each of <workers> workers' slots and its ring, made and put in
 * `rings` (<rings_fd>). 0, or -1 with <why> (the unwinding frees what
 * was made). */
static int
workers_setup(unsigned workers, int rings_fd, char *why, size_t whylen)
{
    fp.nworkers = workers;
    fp.per_worker = FASTPATH_PAIRS / workers;
    fp.workers = calloc(workers, sizeof(*fp.workers));
    if (fp.workers == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    /* None has a ring yet: the unwinding closes only those made. */
    for (unsigned i = 0; i < workers; i++)
        fp.workers[i].ring = -1;
    for (unsigned i = 0; i < workers; i++) {
        struct fp_worker *fw = &fp.workers[i];

        fw->pairs.next = fw->pairs.prev = &fw->pairs;
        fw->free = malloc(fp.per_worker * sizeof(uint32_t));
        fw->by_slot = calloc(fp.per_worker, sizeof(*fw->by_slot));
        if (fw->free == NULL || fw->by_slot == NULL) {
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        fw->ring = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "chashd_fp_ring", 0, 0,
                                  FP_RING_SIZE, NULL);
        if (fw->ring < 0 ||
            bpf_map_update_elem(rings_fd, &i, &fw->ring, BPF_ANY) < 0 ||
            ring_map(fw) < 0) {
            snprintf(why, whylen, "cannot set up worker %u's ring: %s", i,
                     strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Three descriptors and a ring per worker are all chashd needs from
 * here on (a daemon at its descriptor limit serves a pair more per
 * two): the sockhashes hold the program, the program holds `rings`, the
 * mapping holds `pairs`. Our own copies of the three, for fp; 0, or -1
 * with <why> (fp's are still the object's). */
static int
maps_keep(char *why, size_t whylen)
{
    int socks = fcntl(fp.socks, F_DUPFD_CLOEXEC, 0);
    int holds = fcntl(fp.holds, F_DUPFD_CLOEXEC, 0);
    int ends = fcntl(fp.ends, F_DUPFD_CLOEXEC, 0);

    if (socks < 0 || holds < 0 || ends < 0) {
        snprintf(why, whylen, "no descriptor left: %s", strerror(errno));
        if (socks >= 0)
            close(socks);
        if (holds >= 0)
            close(holds);
        if (ends >= 0)
            close(ends);
        return -1;
    }
    fp.socks = socks;
    fp.holds = holds;
    fp.ends = ends;
    return 0;
}

/* fastpath_init failed: undo what it made for <workers> workers. */
static void
init_unwind(unsigned workers)
{
    if (fp.workers != NULL) {
        for (unsigned i = 0; i < workers; i++) {
            free(fp.workers[i].free);
            free(fp.workers[i].by_slot);
            if (fp.workers[i].ring >= 0)
                close(fp.workers[i].ring); /* its mappings stay: rare */
        }
        free(fp.workers);
        fp.workers = NULL;
    }
    if (fp.pairs != NULL)
        munmap(fp.pairs, fp.pairs_len);
    fp.pairs = NULL;
    if (fp.obj == NULL) {
        /* our own copies of the descriptors */
        if (fp.socks >= 0)
            close(fp.socks);
        if (fp.holds >= 0)
            close(fp.holds);
        if (fp.ends >= 0)
            close(fp.ends);
    }
    bpf_object__close(fp.obj); /* closes the maps and the program */
    fp.obj = NULL;
    fp.socks = fp.holds = fp.ends = -1;
}

int
fastpath_init(unsigned workers, char *why, size_t whylen)
{
    int pairs_fd, rings_fd;
    void *m;

    INVARIANT(!fastpath_ready() && workers > 0);
    if (object_load(workers, why, whylen) < 0 ||
        object_attach(&pairs_fd, &rings_fd, why, whylen) < 0)
        goto fail;
    fp.pairs_len = sizeof(struct fp_pair) * FASTPATH_PAIRS;
    m = mmap(NULL, fp.pairs_len, PROT_READ | PROT_WRITE, MAP_SHARED, pairs_fd,
             0);
    if (m == MAP_FAILED) {
        snprintf(why, whylen, "cannot map the pairs' counters: %s",
                 strerror(errno));
        goto fail;
    }
    fp.pairs = m;
    if (workers_setup(workers, rings_fd, why, whylen) < 0 ||
        maps_keep(why, whylen) < 0)
        goto fail; /* the object's own descriptors close with it */
    bpf_object__close(fp.obj);
    fp.obj = NULL;
    atomic_store_explicit(&fp.ready, true, memory_order_release);
    return 0;
fail:
    init_unwind(workers);
    return -1;
}

bool
fastpath_ready(void)
{
    return atomic_load_explicit(&fp.ready, memory_order_acquire);
}

void
fastpath_deinit(void)
{
    long pg = sysconf(_SC_PAGESIZE);

    if (!fastpath_ready())
        return;
    atomic_store_explicit(&fp.ready, false, memory_order_release);
    for (unsigned i = 0; i < fp.nworkers; i++) {
        struct fp_worker *fw = &fp.workers[i];

        munmap(fw->ring_consumer, (size_t)pg);
        munmap((void *)fw->ring_producer, (size_t)pg + 2 * FP_RING_SIZE);
        close(fw->ring);
        free(fw->free);
        free(fw->by_slot);
    }
    free(fp.workers);
    fp.workers = NULL;
    munmap(fp.pairs, fp.pairs_len);
    fp.pairs = NULL;
    close(fp.socks);
    close(fp.holds);
    close(fp.ends);
    fp.socks = fp.holds = fp.ends = -1;
}

bool
fastpath_built_in(void)
{
    return true;
}

/* ---- the worker's pairs ---------------------------------------------------
 */

/* The worker's ring has notes: each names a pair slot whose direction
 * moved FASTPATH_NOTE since chashd last looked; the pair's sweep looks
 * (the bound). Edge-triggered: read to the end. */
static void
ring_event(struct worker *w, struct ev *ev, uint32_t events)
{
    struct fp_worker *fw =
        (struct fp_worker *)((char *)ev - offsetof(struct fp_worker, ring_ev));
    unsigned long cons, prod;

    (void)events;
    cons = __atomic_load_n(fw->ring_consumer, __ATOMIC_ACQUIRE);
    prod = __atomic_load_n(fw->ring_producer, __ATOMIC_ACQUIRE);
    while (cons < prod) {
        const char *rec = fw->ring_data + (cons & (FP_RING_SIZE - 1));
        uint32_t len = __atomic_load_n((const uint32_t *)rec, __ATOMIC_ACQUIRE);
        uint32_t slot;

        if (len & BPF_RINGBUF_BUSY_BIT)
            break; /* being written: its commit wakes us again */
        cons +=
            (BPF_RINGBUF_HDR_SZ + (len & ~BPF_RINGBUF_DISCARD_BIT) + 7) & ~7ul;
        if (!(len & BPF_RINGBUF_DISCARD_BIT) && (len & 0xffffff) >= 4) {
            memcpy(&slot, rec + BPF_RINGBUF_HDR_SZ, sizeof(slot));
            slot -= w->id * fp.per_worker;
            if (slot < fp.per_worker && fw->by_slot[slot] != NULL)
                fw->by_slot[slot]->sweep(w, fw->by_slot[slot]);
        }
        __atomic_store_n(fw->ring_consumer, cons, __ATOMIC_RELEASE);
        prod = __atomic_load_n(fw->ring_producer, __ATOMIC_ACQUIRE);
    }
}

static void
sweep_run(struct worker *w, struct timer *t)
{
    struct fp_worker *fw =
        (struct fp_worker *)((char *)t - offsetof(struct fp_worker, sweep));
    struct fastpath_pair *p, *next;

    /* A pair's sweep may close it (it leaves the list): take <next>
     * first. */
    for (p = fw->pairs.next; p != &fw->pairs; p = next) {
        next = p->next;
        p->sweep(w, p);
    }
    if (fw->pairs.next != &fw->pairs)
        worker_timer_set(w, &fw->sweep, w->now_ms + FASTPATH_SWEEP_MS);
}

/* Bytes of socket <fd> its peer has acknowledged (TCP_INFO). */
static int
acked(int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
        return -1;
    if (len < offsetof(struct tcp_info, tcpi_bytes_acked) +
                  sizeof(ti.tcpi_bytes_acked)) {
        errno = EOPNOTSUPP;
        return -1;
    }
    *out = ti.tcpi_bytes_acked;
    return 0;
}

/*
 * Bytes written to socket <fd> so far: acknowledged by its peer, plus
 * what waits in its send queue (write_seq - snd_una). Read in that order,
 * so that an ACK between the two calls makes the sum smaller, never
 * larger: a FIN or a write of chashd's is held back, never sent early.
 *
 * <exact>: the count at entry, which every later one is measured from.
 * That race makes a later count smaller, which only makes chashd wait,
 * but a base too small would make every later answer too small, for the
 * pair's life. Nothing else writes to the socket then, so a count whose
 * acked bytes are the same after SIOCOUTQ as before is exact; EAGAIN when
 * ACKs keep coming (the caller tries again later).
 */
static int
written(int fd, uint64_t *out, bool exact)
{
    for (int tries = 0; tries < 8; tries++) {
        uint64_t before, after;
        int outq = 0;

        if (acked(fd, &before) < 0 || ioctl(fd, SIOCOUTQ, &outq) < 0)
            return -1;
        if (exact && acked(fd, &after) < 0)
            return -1;
        if (!exact || before == after) {
            *out = before + (uint64_t)(outq > 0 ? outq : 0);
            return 0;
        }
    }
    errno = EAGAIN;
    return -1;
}

static int
cookie_of(int fd, uint64_t *cookie)
{
    socklen_t len = sizeof(*cookie);

    return getsockopt(fd, SOL_SOCKET, SO_COOKIE, cookie, &len);
}

/* The first pair of worker <w> (<fw>): its range of slots, lowest on
 * top, its sweep, and its ring in its epoll. */
static void
worker_fill(struct fp_worker *fw, struct worker *w)
{
    struct epoll_event e = {.events = EPOLLIN | EPOLLET,
                            .data.ptr = &fw->ring_ev};

    for (uint32_t i = 0; i < fp.per_worker; i++)
        fw->free[i] = w->id * fp.per_worker + (fp.per_worker - 1 - i);
    fw->nfree = fp.per_worker;
    fw->filled = true;
    fw->w = w;
    fw->sweep.on_expire = sweep_run;
    fw->ring_ev.handler = ring_event;
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fw->ring, &e) < 0)
        log_warn("fast path: worker %u cannot watch its ring: %s; "
                 "its bound is looked at every %dms only",
                 w->id, strerror(errno), FASTPATH_SWEEP_MS);
}

/* Whether <p>'s sockets may enter, and where their streams stand: their
 * cookies and bases. 0, or -1 with errno (EAGAIN: try later). */
static int
pair_measure(struct fastpath_pair *p)
{
    /* The program takes a receive queue whole from its head, skb by skb:
     * one chashd has read a part of would go out again. A queue with
     * nothing unread holds no such part, and whatever comes next is
     * whole. */
    for (int i = 0; i < 2; i++) {
        int inq = 0;

        if (ioctl(p->fd[i], SIOCINQ, &inq) < 0)
            return -1;
        if (inq > 0) {
            errno = EAGAIN;
            return -1;
        }
    }
    for (int i = 0; i < 2; i++)
        if (cookie_of(p->fd[i], &p->cookie[i]) < 0 ||
            written(p->fd[i], &p->base[i], true) < 0)
            return -1;
    return 0;
}

/* Put <p> (of worker <w>, its slot taken) into the maps: its ends, then
 * its sockets. 0, or -1 with errno and the maps as they were. */
static int
pair_insert(struct worker *w, struct fastpath_pair *p)
{
    int held = 0;

    for (int i = 0; i < 2; i++) {
        struct fp_end e = {
            .pair = p->slot, .side = (uint32_t)i, .worker = w->id};

        if (bpf_map_update_elem(fp.ends, &p->cookie[i], &e, BPF_NOEXIST) < 0)
            goto undo;
    }
    /* Into `holds` first (no program: nothing moves yet, and taking them
     * out again loses nothing), then into `socks`, where the program
     * starts on their input. */
    for (held = 0; held < 2; held++) {
        uint32_t key = FP_SOCK_KEY(p->slot, (uint32_t)held);
        uint32_t fd = (uint32_t)p->fd[held];

        if (bpf_map_update_elem(fp.holds, &key, &fd, BPF_NOEXIST) < 0)
            goto undo;
    }
    for (int i = 0; i < 2; i++) {
        uint32_t key = FP_SOCK_KEY(p->slot, (uint32_t)i);
        uint32_t fd = (uint32_t)p->fd[i];

        if (bpf_map_update_elem(fp.socks, &key, &fd, BPF_NOEXIST) < 0) {
            if (i == 0)
                goto undo;
            /* The member's input stays chashd's (out of memory, rare):
             * the client's still goes to it through `holds`. */
            log_warn_limited(1,
                             "fast path: sockhash: %s; a member's "
                             "bytes stay in user space",
                             strerror(errno));
            break;
        }
        p->in[i] = true;
    }
    return 0;
undo : {
    int err = errno;

    for (int i = 0; i < held; i++) {
        uint32_t key = FP_SOCK_KEY(p->slot, (uint32_t)i);
        bpf_map_delete_elem(fp.holds, &key);
    }
    for (int i = 0; i < 2; i++)
        bpf_map_delete_elem(fp.ends, &p->cookie[i]);
    errno = err;
    return -1;
}
}

int
fastpath_enter(struct worker *w, struct fastpath_pair *p, int client_fd,
               int member_fd, fastpath_sweep_fn *sweep)
{
    struct fp_worker *fw;
    struct fp_pair *slot;
    int one = 1;

    if (!fastpath_ready()) {
        errno = ENOSYS;
        return -1;
    }
    INVARIANT(w->id < fp.nworkers);
    fw = &fp.workers[w->id];
    if (!fw->filled)
        worker_fill(fw, w);
    if (fw->nfree == 0) {
        errno = ENOSPC;
        return -1;
    }
    memset(p, 0, sizeof(*p));
    p->fd[FP_CLIENT] = client_fd;
    p->fd[FP_MEMBER] = member_fd;
    p->sweep = sweep;
    if (pair_measure(p) < 0)
        return -1;
    p->slot = fw->free[fw->nfree - 1];
    /* The slot is nobody's: its sockets closed (they left the maps) and
     * its ends were deleted before it was given back. */
    slot = &fp.pairs[p->slot];
    for (int i = 0; i < 2; i++) {
        store64(&slot->redirected[i], 0);
        store64(&slot->passed[i], 0);
        store64(&slot->consumed[i], 0);
        store64(&slot->limit[i], FASTPATH_WINDOW);
        store64(&slot->noted[i], 0);
        store64(&slot->note[i], FASTPATH_NOTE);
    }
    if (pair_insert(w, p) < 0)
        return -1;
    /* Bytes that arrived before the program was attached wait in the
     * receive queue, and the program sees a queue only when a segment
     * comes: setting the low-water mark runs it at once on what waits. */
    for (int i = 0; i < 2; i++)
        if (p->in[i])
            setsockopt(p->fd[i], SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
    fw->nfree--;
    fw->by_slot[p->slot - w->id * fp.per_worker] = p;
    p->next = &fw->pairs;
    p->prev = fw->pairs.prev;
    fw->pairs.prev->next = p;
    fw->pairs.prev = p;
    if (p->prev == &fw->pairs)
        worker_timer_set(w, &fw->sweep, w->now_ms + FASTPATH_SWEEP_MS);
    return 0;
}

void
fastpath_leave(struct worker *w, struct fastpath_pair *p)
{
    struct fp_worker *fw = &fp.workers[w->id];

    INVARIANT(p->next != NULL && p->slot / fp.per_worker == w->id);
    p->prev->next = p->next;
    p->next->prev = p->prev;
    p->next = p->prev = NULL;
    for (int i = 0; i < 2; i++)
        bpf_map_delete_elem(fp.ends, &p->cookie[i]);
    fw->by_slot[p->slot - w->id * fp.per_worker] = NULL;
    fw->free[fw->nfree++] = p->slot;
    if (fw->pairs.next == &fw->pairs)
        worker_timer_del(w, &fw->sweep);
}

bool
fastpath_due(const struct fastpath_pair *p, int side)
{
    return load64(&fp.pairs[p->slot].passed[side]) != p->consumed[side];
}

uint64_t
fastpath_left(const struct fastpath_pair *p, int side)
{
    uint64_t passed = load64(&fp.pairs[p->slot].passed[side]);

    /* Never past what was passed, were a read to return bytes the
     * program did not see: that is no flood to close the pair for. */
    return passed > p->consumed[side] ? passed - p->consumed[side] : 0;
}

bool
fastpath_unread(const struct fastpath_pair *p, int side, uint64_t read)
{
    return load64(&fp.pairs[p->slot].passed[side]) > read;
}

void
fastpath_consume(struct fastpath_pair *p, int side, uint64_t n)
{
    if (n == p->consumed[side])
        return;
    p->consumed[side] = n;
    store64(&fp.pairs[p->slot].consumed[side], n);
}

uint64_t
fastpath_redirected(const struct fastpath_pair *p, int side)
{
    return load64(&fp.pairs[p->slot].redirected[side]);
}

int64_t
fastpath_pending(struct fastpath_pair *p, int side)
{
    int to = side ^ 1;
    uint64_t red, now, drained;
    int64_t pending;

    /* The kernel's count first: bytes it moves after this are not in the
     * answer, which the caller knows (it asks again before a FIN). */
    red = fastpath_redirected(p, side);
    if (written(p->fd[to], &now, false) < 0)
        return -1;
    /* Written to <to> since the pair entered: what the kernel moved
     * there and what chashd wrote there of the direction's bytes. */
    drained = now - p->base[to] - p->consumed[side];
    pending = (int64_t)(red - drained);
    if (pending < 0)
        pending = 0; /* an ACK between the kernel's count and ours */
    p->drained[side] = red - (uint64_t)pending;
    /* The bound moves with what the peer has taken; the next look comes
     * when the kernel has moved FASTPATH_NOTE more than that. */
    store64(&fp.pairs[p->slot].limit[side], p->drained[side] + FASTPATH_WINDOW);
    store64(&fp.pairs[p->slot].note[side], p->drained[side] + FASTPATH_NOTE);
    return pending;
}

bool
fastpath_near_limit(const struct fastpath_pair *p, int side)
{
    return fastpath_redirected(p, side) - p->drained[side] >= FASTPATH_NOTE;
}

#else /* !CHASH_FASTPATH: built without clang or libbpf */

int
fastpath_init(unsigned workers, char *why, size_t whylen)
{
    (void)workers;
    snprintf(why, whylen,
             "chashd was built without it (clang and libbpf-dev at build "
             "time)");
    return -1;
}

bool
fastpath_ready(void)
{
    return false;
}

void
fastpath_deinit(void)
{
}

bool
fastpath_built_in(void)
{
    return false;
}

int
fastpath_enter(struct worker *w, struct fastpath_pair *p, int client_fd,
               int member_fd, fastpath_sweep_fn *sweep)
{
    (void)w, (void)p, (void)client_fd, (void)member_fd, (void)sweep;
    errno = ENOSYS;
    return -1;
}

void
fastpath_leave(struct worker *w, struct fastpath_pair *p)
{
    (void)w, (void)p;
}

bool
fastpath_due(const struct fastpath_pair *p, int side)
{
    (void)p, (void)side;
    return false;
}

uint64_t
fastpath_left(const struct fastpath_pair *p, int side)
{
    (void)p, (void)side;
    return 0;
}

bool
fastpath_unread(const struct fastpath_pair *p, int side, uint64_t read)
{
    (void)p, (void)side, (void)read;
    return false;
}

void
fastpath_consume(struct fastpath_pair *p, int side, uint64_t n)
{
    (void)p, (void)side, (void)n;
}

uint64_t
fastpath_redirected(const struct fastpath_pair *p, int side)
{
    (void)p, (void)side;
    return 0;
}

int64_t
fastpath_pending(struct fastpath_pair *p, int side)
{
    (void)p, (void)side;
    return 0;
}

bool
fastpath_near_limit(const struct fastpath_pair *p, int side)
{
    (void)p, (void)side;
    return false;
}

#endif

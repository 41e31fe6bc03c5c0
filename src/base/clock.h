/* clock.h -- the monotonic millisecond clock chashd's timers use, and the
 * wall clock for time stamps.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_CLOCK_H
#define CHASHD_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Milliseconds from CLOCK_MONOTONIC (precise; control thread, timers). */
static inline uint64_t
clock_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Microseconds from CLOCK_MONOTONIC (precise; latencies). */
static inline uint64_t
clock_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The same from the coarse clock: a few ms of resolution, no syscall
 * cost on the data path (workers read it once per loop iteration). */
static inline uint64_t
clock_coarse_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Unix time in milliseconds (CLOCK_REALTIME): time stamps other hosts
 * read, never timers. */
static inline uint64_t
clock_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#endif /* CHASHD_CLOCK_H */

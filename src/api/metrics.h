/* metrics.h -- chashd's Prometheus exposition (text format 0.0.4): per
 * member, per pool and process metrics, rendered on demand by the control
 * thread from the pools' counters.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_METRICS_H
#define CHASHD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Note the process start (stats_process_start: uptime); call once at
 * start-up. Later calls are ignored. */
void metrics_init(void);

/* Count a config reload, successful or refused (main.c's reload path). */
void metrics_note_reload(bool ok);

/* Render every metric; returns a malloc'd text of *<len> bytes (the caller
 * frees it), or NULL when out of memory. Control thread. */
char *metrics_render(size_t *len);

#endif /* CHASHD_METRICS_H */

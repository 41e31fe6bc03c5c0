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

/* Note the process start (for uptime); call once at start-up. Later calls
 * are ignored. */
void metrics_init(void);

/* Seconds since metrics_init (any thread). */
double metrics_uptime(void);

/* Count a config reload, successful or refused (main.c's reload path). */
void metrics_note_reload(bool ok);

/* Render every metric; returns a malloc'd text of *<len> bytes (the caller
 * frees it), or NULL when out of memory. Control thread. */
char *metrics_render(size_t *len);

/* Write <s> as a Prometheus label value (without quotes): backslash,
 * double quote and newline escaped, as the text format requires. */
void metrics_label_escape(FILE *f, const char *s);

#endif /* CHASHD_METRICS_H */

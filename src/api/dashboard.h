/* dashboard.h -- the live ring dashboard page chashd serves at GET /,
 * embedded in the binary (src/dashboard.c is generated from
 * src/dashboard.html): no CDN, no file to install.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_DASHBOARD_H
#define CHASHD_DASHBOARD_H

#include <stddef.h>

extern const char dashboard_html[];
extern const size_t dashboard_html_len;

#endif /* CHASHD_DASHBOARD_H */

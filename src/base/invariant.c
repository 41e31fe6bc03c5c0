/* invariant.c -- what a failed INVARIANT() does: say where, then abort.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "base/invariant.h"

#include <stdlib.h>

#include "base/log.h"

_Noreturn void
invariant_failed(const char *file, int line, const char *expr)
{
    /* log_write is one write(2): the line reaches the log even if the
     * process dies right after. */
    log_write(LOG_ERROR, "invariant failed: %s at %s:%d; aborting", expr, file,
              line);
    abort();
}

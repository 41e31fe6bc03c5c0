/* invariant.h -- always-on checks (HAProxy's BUG_ON) at the places where a
 * broken invariant would corrupt state silently: reference counts, QSBR
 * epochs, list membership, buffer bounds. A failed check logs the file,
 * line and expression and aborts: a core dump beats a corrupted ring.
 * Build with -DCHASH_INVARIANTS=0 to compile them out (not recommended;
 * debug and CI builds keep them).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_INVARIANT_H
#define CHASHD_INVARIANT_H

#ifndef CHASH_INVARIANTS
#define CHASH_INVARIANTS 1
#endif

/* Log "invariant failed: <expr> at <file>:<line>" and abort(). */
_Noreturn void invariant_failed(const char *file, int line, const char *expr);

#if CHASH_INVARIANTS
#define INVARIANT(cond)                                                        \
    do {                                                                       \
        if (__builtin_expect(!(cond), 0))                                      \
            invariant_failed(__FILE__, __LINE__, #cond);                       \
    } while (0)
#else
#define INVARIANT(cond) ((void)0)
#endif

#endif /* CHASHD_INVARIANT_H */

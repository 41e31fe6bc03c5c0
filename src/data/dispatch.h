/* dispatch.h -- which connection engine serves a mode: the tcp splice
 * (bytes both ways between a client and one member), the http engine,
 * the request engine of the store modes. The worker's listeners hand each
 * accepted client to it through the worker's hooks, which dispatch_init
 * registers (main.c calls it at start).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_DISPATCH_H
#define CHASHD_DISPATCH_H

/* Wire the engines before the workers start: the worker loop's hooks (a
 * client accepted on a pool's listener goes to the engine of the pool's
 * mode, read from the current snapshot: a reload may change the mode
 * while the listener is kept; pools referenced and snapshots' epochs kept
 * by model/pool) and the request engine's store modes. */
void dispatch_init(void);

#endif /* CHASHD_DISPATCH_H */

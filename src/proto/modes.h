/* modes.h -- the codec of each pool mode (proto/modes.c).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_PROTO_MODES_H
#define CHASHD_PROTO_MODES_H

#include "proto/proto.h"

/* The table of <mode> (enum conf_mode), or NULL when that mode is not
 * implemented yet. */
const struct proto *proto_find(int mode);

#endif /* CHASHD_PROTO_MODES_H */

/* hash_compat.h -- the key hash functions of twemproxy and libmemcached
 * (libhashkit), in hash_compat.c; hash.c names them in its table.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_HASH_COMPAT_H
#define CHASH_HASH_COMPAT_H

#include <stddef.h>
#include <stdint.h>

uint64_t chash__one_at_a_time(const void *key, size_t len);
uint64_t chash__crc16(const void *key, size_t len);
uint64_t chash__fnv1_64(const void *key, size_t len);
uint64_t chash__fnv1a_64_tw(const void *key, size_t len);
uint64_t chash__fnv1_32(const void *key, size_t len);
uint64_t chash__fnv1a_32(const void *key, size_t len);
uint64_t chash__hsieh(const void *key, size_t len);
uint64_t chash__murmur2_tw(const void *key, size_t len);
uint64_t chash__jenkins(const void *key, size_t len);

#endif /* CHASH_HASH_COMPAT_H */

/* fuzz_etcd.c -- libFuzzer driver for the pure parts of chashd's etcd
 * client: what etcd (or whoever writes under the prefix) sends is any
 * bytes. base64 must decode only what re-encodes to the same text; a key
 * split must point inside the key; a member record either parses to a
 * name and address that pass their own checks, or is refused with a
 * reason -- never a crash or a read past the end.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf/etcd_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), *d, *e, *pool = NULL, *member = NULL;
    struct etcd_record r;
    const char *why;
    size_t n;

    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    /* base64: what decodes re-encodes to the same text */
    d = etcd_b64_decode(s, &n);
    if (d != NULL) {
        e = etcd_b64_encode(d, n);
        if (e == NULL || strcmp(e, s) != 0)
            abort();
        free(e);
        free(d);
    }
    /* any bytes encode to a text that decodes back to them */
    e = etcd_b64_encode(data, size);
    d = e ? etcd_b64_decode(e, &n) : NULL;
    if (e != NULL && (d == NULL || n != size || memcmp(d, data, size) != 0))
        abort();
    free(e);
    free(d);

    /* the record: the name is the first line, the value the rest */
    d = strchr(s, '\n');
    if (d != NULL) {
        *d = '\0';
        why = etcd_record_parse(s, d + 1, size - (size_t)(d + 1 - s), &r);
        if (why == NULL &&
            (!etcd_name_ok(s) || !etcd_address_ok(r.address) || r.weight < 1 ||
             r.weight > 1000000 || r.state < 0 || r.state > ETCD_STATE_MAINT))
            abort();
        *d = '\n';
    }
    /* the key layout: pointers inside the key, names without '/' */
    switch (etcd_key_split(s, &pool, &member)) {
    case ETCD_KEY_MEMBER:
        if (pool < s || pool > s + size || strchr(pool, '/') != NULL)
            abort();
        /* fallthrough */
    case ETCD_KEY_INSTANCE:
        if (member < s || member > s + size || strchr(member, '/') != NULL ||
            *member == '\0')
            abort();
        break;
    default:
        break;
    }
    free(s);
    return 0;
}

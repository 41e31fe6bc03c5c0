/* fuzz_state.c -- libFuzzer driver for the state file loader: a state file
 * is what chashd wrote, or what a crash, a full disk or an operator's
 * editor left. Any bytes must load into a state or be refused with a
 * message, leaving the state as it was; a state that loads is applied to
 * a small config (every entry that no longer fits is skipped, never
 * applied half), and written back and read again to the same JSON.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "conf/conf.h"
#include "model/state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char config[] =
    "global:\n  admin: off\n  workers: 1\n"
    "web:\n  listen: 127.0.0.1:7001\n  mode: tcp\n"
    "  servers: [127.0.0.1:9001:1 web-1, 127.0.0.1:9002:2 web-2]\n"
    "kv:\n  listen: 127.0.0.1:7002\n  mode: redis\n  migration: off\n"
    "  servers: [127.0.0.1:9101:1 r1]\n";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), err[1024], warn[2048];
    struct state *st = state_create(), *again = NULL;
    struct conf *conf = NULL;
    json_t *a = NULL, *b = NULL;
    char *dump = NULL;

    if (text == NULL || st == NULL)
        goto out;
    memcpy(text, data, size);
    text[size] = '\0';
    if (state_load_string(st, "fuzz", text, err, sizeof(err)) != 0) {
        /* refused: with a reason, and nothing taken from it */
        if (err[0] == '\0')
            abort();
        a = state_json(st);
        if (json_object_size(json_object_get(a, "pools")) != 0)
            abort();
        goto out;
    }
    conf = conf_load_string("fuzz.yml", config, sizeof(config) - 1, err,
                            sizeof(err));
    if (conf == NULL)
        abort();
    if (state_apply(st, conf, warn, sizeof(warn)) != 0)
        goto out; /* out of memory only */
    /* what it holds survives its own round trip */
    a = state_json(st);
    dump = a ? json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    again = state_create();
    if (dump == NULL || again == NULL)
        goto out;
    if (state_load_string(again, "again", dump, err, sizeof(err)) != 0)
        abort();
    b = state_json(again);
    if (!json_equal(a, b))
        abort();
out:
    json_decref(a);
    json_decref(b);
    free(dump);
    state_destroy(again);
    state_destroy(st);
    conf_destroy(conf);
    free(text);
    return 0;
}

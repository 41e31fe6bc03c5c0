/* fuzz_conf.c -- libFuzzer driver for the config loader: any bytes are a
 * YAML file; loading must end in a conf or a "file:line: message" error,
 * never a crash or a leak.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    struct conf *conf;

    err[0] = '\0';
    conf = conf_load_string("fuzz.yml", (const char *)data, size, err,
                            sizeof(err));
    if (conf == NULL) {
        /* every refusal names the file and a line */
        if (strncmp(err, "fuzz.yml:", 9) != 0)
            abort();
        return 0;
    }
    conf_destroy(conf);
    return 0;
}

/* lookup.c -- `chash lookup`: print which member owns each key (and its
 * replicas), from a member list on the command line or from a pool of a
 * chashd config file, built exactly as the daemon builds it.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "cli.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chash/chash.h"
#include "util.h"

#define CMD "lookup"

static const char usage_text[] =
    "usage: chash lookup [--algo A] [--hash H] [--points N] [--table-size M]\n"
    "                    --members LIST [--replicas N] [KEY ...]\n"
    "       chash lookup --config FILE --pool NAME [--replicas N] [KEY ...]\n"
    "  LIST is name[=weight],... (the weight follows the last '=')\n"
    "  Prints key<TAB>member (with --replicas N: key<TAB>m1<TAB>m2...).\n"
    "  Keys come from the arguments, or one per line from stdin (empty\n"
    "  lines are skipped; a trailing CR is dropped).\n"
    "  --points N      the ring's points per unit of weight (default 160,\n"
    "                  --algo ring only); --table-size M: maglev's prime\n"
    "                  table size (default 65537)\n"
    "  --config FILE --pool NAME  the pool's ring as chashd builds it\n"
    "  For a tcp pool the key is the client address as chashd writes it:\n"
    "  the IP (hash_key: source_ip), or IP:port / [v6]:port "
    "(source_ip_port).\n"
    "  For an http pool it is the value of the first source of its hash_key\n"
    "  chain the request has: a header's, cookie's or query parameter's\n"
    "  value as sent (cookie:session, session=abc -> abc), the path, the\n"
    "  uri (path and query), the Host in lower case, or the client IP.\n";

struct lookup {
    struct chash_ring *ring;
    size_t replicas;
    size_t *out;
    char tag[3];        /* twemproxy hash_tag, "" when unset */
};

/* twemproxy's hash_tag (libchash's one rule). */
static void
tagged(const struct lookup *l, const char *key, size_t len,
       const char **part, size_t *plen)
{
    size_t off;

    *plen = chash_key_tag(key, len, l->tag, &off);
    *part = key + off;
}

static void
print_key(const struct lookup *l, const char *key, size_t len)
{
    const char *part;
    size_t plen, got;

    tagged(l, key, len, &part, &plen);
    uint64_t h = chash_ring_hash(l->ring, part, plen);
    got = chash_ring_lookup_n(l->ring, h, l->out, l->replicas);
    fwrite(key, 1, len, stdout);
    for (size_t i = 0; i < got; i++)
        printf("\t%s", chash_ring_member_name(l->ring, l->out[i]));
    putchar('\n');
}

static int
run(struct lookup *l, int nkeys, char **keys)
{
    l->out = malloc(l->replicas * sizeof(*l->out));
    if (l->out == NULL) {
        cli_error(CMD, "out of memory");
        return CLI_EXIT_FAIL;
    }
    if (l->replicas > chash_ring_members(l->ring))
        cli_error(CMD, "note: --replicas %zu but only %zu members; printing "
                       "the distinct ones",
                  l->replicas, chash_ring_members(l->ring));
    if (nkeys > 0) {
        for (int i = 0; i < nkeys; i++)
            print_key(l, keys[i], strlen(keys[i]));
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while ((n = getline(&line, &cap, stdin)) >= 0) {
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                n--;
            /* A blank line separates, it is not a key: looked up as the
             * empty key it printed an owner nobody asked for. An empty
             * key can still be given as an argument. */
            if (n == 0)
                continue;
            print_key(l, line, (size_t)n);
        }
        free(line);
    }
    free(l->out);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error(CMD, "cannot write the output");
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

int
cmd_lookup(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"members", required_argument, NULL, 'm'},
        {"algo", required_argument, NULL, 'a'},
        {"hash", required_argument, NULL, 'H'},
        {"points", required_argument, NULL, 'p'},
        {"table-size", required_argument, NULL, 't'},
        {"replicas", required_argument, NULL, 'r'},
        {"config", required_argument, NULL, CLI_OPT_CONFIG},
        {"pool", required_argument, NULL, CLI_OPT_POOL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct cli_ring r = {0};
    struct lookup l = {0};
    uint32_t replicas = 1;
    int c, ropt, rc = CLI_EXIT_USAGE;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            if (cli_parse_u32(CMD, "--replicas", optarg, 1, 1000000,
                              &replicas) != 0)
                goto usage;
            break;
        case 'h':
            fputs(usage_text, stdout);
            rc = CLI_EXIT_OK;
            goto out;
        default:
            if ((ropt = cli_ring_option(CMD, c, optarg, &r)) < 0)
                goto usage;
            if (ropt > 0)
                break;
            rc = cli_bad_option(CMD, usage_text, argv, c);
            goto out;
        }
    }
    l.replicas = replicas;
    rc = cli_ring_setup(CMD, usage_text, &r, true);
    if (rc != CLI_EXIT_OK)
        goto out;
    memcpy(l.tag, r.tag, sizeof(l.tag));
    if (cli_ring_create(CMD, &r.cfg, &r.ms, &l.ring) != 0) {
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    rc = run(&l, argc - optind, argv + optind);
    goto out;
usage:
    fputs(usage_text, stderr);
    rc = CLI_EXIT_USAGE;
out:
    chash_ring_destroy(l.ring);
    cli_ring_deinit(&r);
    return rc;
}

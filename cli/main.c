/* main.c -- the chash command line: `chash <subcommand> [options]`,
 * dispatching to one file per subcommand (cli.h).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include "chash/chash.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} subcommands[] = {
    {"sim", cmd_sim, "simulate distribution and migration on membership changes"},
    {"lookup", cmd_lookup, "print which member(s) own each key"},
    {"bench", cmd_bench, "benchmark lookup speed, build time, memory, balance"},
    {"plot", cmd_plot, "draw the ring as SVG (arcs per member, loads)"},
    {"serve", cmd_serve, "run a demo backend that answers with its name"},
    {"ctl", cmd_ctl, "drive a running chashd: members, reports, lookups"},
};

static void
usage(FILE *f)
{
    fprintf(f, "usage: chash <command> [options]\n"
               "       chash <command> --help\n"
               "       chash --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].what);
    fprintf(f, "\nSee chash(1) for the options of each command.\n");
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "chash: a command is needed\n");
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 ||
        strcmp(argv[1], "version") == 0) {
        printf("chash %s\n", CHASH_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        if (strcmp(argv[1], subcommands[i].name) == 0)
            return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "chash: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

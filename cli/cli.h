/* cli.h -- the subcommands of the chash command line, one file each,
 * dispatched by cli/main.c. Each returns the process exit status:
 * 0 success, 1 runtime failure, 2 bad arguments (after printing what is
 * wrong and the usage to stderr).
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASH_CLI_H
#define CHASH_CLI_H

int cmd_sim(int argc, char **argv);    /* cli/sim.c */
int cmd_lookup(int argc, char **argv); /* cli/lookup.c */
int cmd_bench(int argc, char **argv);  /* cli/bench.c */
int cmd_plot(int argc, char **argv);   /* cli/plot.c */
int cmd_serve(int argc, char **argv);  /* cli/serve.c: demo/stub backend */
int cmd_ctl(int argc, char **argv);    /* cli/ctl.c: drive a running chashd */

#endif /* CHASH_CLI_H */

/* builder.h -- one background thread for the control thread's heavy work:
 * building ring snapshots and migration reports (a ring of a few million
 * points takes a second or more to build and compare), and loading a
 * config (file reads and DNS). The control thread keeps running health
 * checks, ramps, signals and the admin API meanwhile; each job's result
 * comes back to it through the control loop.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#ifndef CHASHD_BUILDER_H
#define CHASHD_BUILDER_H

#include <stdbool.h>

/*
 * A job: embed it in the caller's struct. <work> runs on the builder
 * thread and may touch only what the job owns (and immutable data it
 * pins); <done> runs afterwards on the control thread, where the caller
 * frees the job. Jobs run and complete one at a time, in submission
 * order. <cancelled> is true when the builder stopped before the job ran
 * (shutdown): <done> must still release what the job holds.
 */
struct builder_job {
    void (*work)(struct builder_job *job);
    void (*done)(struct builder_job *job);
    bool cancelled;
    struct builder_job *next;
};

/* Start the thread and watch its completions from the control loop. Until
 * this is called (unit tests), builder_submit() runs a job's work and
 * done at once, in the caller. 0 or -1. */
int builder_init(void);

/* Stop: the job running finishes; every other queued job completes as
 * cancelled; every <done> has run when this returns. */
void builder_deinit(void);

/* Queue <job> (control thread). */
void builder_submit(struct builder_job *job);

/* Jobs queued or running (for tests and the metrics). */
unsigned builder_pending(void);

#endif /* CHASHD_BUILDER_H */

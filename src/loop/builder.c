/* builder.c -- the background thread of the control thread: a FIFO of
 * jobs, run one at a time; finished jobs are handed back through an
 * eventfd the control loop watches, and their <done> runs there, in
 * order.
 * SPDX-License-Identifier: BSD-2-Clause
 */
#include "loop/builder.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/invariant.h"
#include "base/log.h"
#include "loop/control.h"

static pthread_t thread;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
/* Guarded by <lock>: jobs to run (FIFO), jobs run and not yet handed
 * back (FIFO), whether to stop. */
static struct builder_job *todo, **todo_tail = &todo;
static struct builder_job *finished, **finished_tail = &finished;
static bool stopping;
static bool running;     /* the thread exists (control thread's view) */
static unsigned pending; /* control thread: submitted, done not yet run */
static struct control_watch watch = {.fd = -1};

static void
push(struct builder_job ***tail, struct builder_job *job)
{
    job->next = NULL;
    **tail = job;
    *tail = &job->next;
}

static struct builder_job *
take_all(struct builder_job **head, struct builder_job ***tail)
{
    struct builder_job *list = *head;

    *head = NULL;
    *tail = head;
    return list;
}

static void *
builder_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        struct builder_job *job;
        uint64_t one = 1;

        while (todo == NULL && !stopping)
            pthread_cond_wait(&wake, &lock);
        if (stopping)
            break;
        job = todo;
        todo = job->next;
        if (todo == NULL)
            todo_tail = &todo;
        pthread_mutex_unlock(&lock);
        job->work(job);
        pthread_mutex_lock(&lock);
        push(&finished_tail, job);
        if (write(watch.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
            log_error("builder: eventfd: %s", strerror(errno));
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* Run the <done> of every finished job, in order (control thread). */
static void
complete(struct builder_job *list)
{
    while (list != NULL) {
        struct builder_job *job = list;

        list = job->next;
        INVARIANT(pending > 0);
        pending--;
        job->done(job);
    }
}

static void
on_finished(struct control_watch *w, uint32_t events)
{
    struct builder_job *list;
    uint64_t v;

    (void)events;
    if (read(w->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_error("builder: eventfd: %s", strerror(errno));
    pthread_mutex_lock(&lock);
    list = take_all(&finished, &finished_tail);
    pthread_mutex_unlock(&lock);
    complete(list);
}

int
builder_init(void)
{
    sigset_t all, old;
    int rc;

    watch.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    watch.cb = on_finished;
    if (watch.fd < 0 || control_watch_add(&watch, EPOLLIN) < 0)
        goto fail;
    stopping = false;
    /* No signal for this thread: they go to the control thread's
     * signalfd (the caller has blocked them already; be sure). */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&thread, NULL, builder_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        control_watch_del(&watch);
        goto fail;
    }
    running = true;
    return 0;
fail:
    if (watch.fd >= 0)
        close(watch.fd);
    watch.fd = -1;
    return -1;
}

void
builder_deinit(void)
{
    struct builder_job *list, *cancelled;

    if (!running)
        return;
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
    running = false;
    list = take_all(&finished, &finished_tail);
    cancelled = take_all(&todo, &todo_tail);
    complete(list);
    for (struct builder_job *j = cancelled; j != NULL; j = j->next)
        j->cancelled = true;
    complete(cancelled);
    control_watch_del(&watch);
    close(watch.fd);
    watch.fd = -1;
}

void
builder_submit(struct builder_job *job)
{
    job->cancelled = false;
    pending++;
    if (!running) {
        /* No thread (unit tests, or before start-up): run it here. */
        job->work(job);
        pending--;
        job->done(job);
        return;
    }
    pthread_mutex_lock(&lock);
    push(&todo_tail, job);
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
}

unsigned
builder_pending(void)
{
    return pending;
}

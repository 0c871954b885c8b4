/* ofindex/csrc/threads.h on its own, with no Python (tests/native/test_native_portable.py).
 *
 * Built for this machine it runs: a helper thread hands 20,000 values one at a time to the
 * main thread through a mutex and a condition variable (each side waits for the other), and
 * the sum must be exact. Built with -DOFINDEX_NO_THREADS, thread_start must refuse. Built
 * with mingw-w64 it is the Windows branch's compile and link check (it is not run there).
 * Exit 0 and one line naming the branch on success; 1 with the reason otherwise. */
#include <stdio.h>
#include <string.h>

#include "threads.h"

#define VALUES 20000

typedef struct {
    mutex_t mu;
    cond_t cv;
    long slot;   /* the value handed over, or -1 when the slot is empty */
    int closed;  /* the helper has handed everything over */
} Channel;

static void producer(void *arg) {
    Channel *ch = (Channel *)arg;
    for (long v = 1; v <= VALUES; v++) {
        mutex_lock(&ch->mu);
        while (ch->slot >= 0)
            cond_wait(&ch->cv, &ch->mu);
        ch->slot = v;
        cond_broadcast(&ch->cv);
        mutex_unlock(&ch->mu);
    }
    mutex_lock(&ch->mu);
    while (ch->slot >= 0)
        cond_wait(&ch->cv, &ch->mu);
    ch->closed = 1;
    cond_broadcast(&ch->cv);
    mutex_unlock(&ch->mu);
}

int main(void) {
    Channel ch;
    thread_t thread;
    ch.slot = -1;
    ch.closed = 0;
    mutex_init(&ch.mu);
    cond_init(&ch.cv);
    int started = thread_start(&thread, producer, &ch) == 0;
    if (strcmp(OFINDEX_THREADS, "none") == 0) {
        if (started) {
            puts("none: thread_start succeeded without threads");
            return 1;
        }
        puts("none: thread_start refused");
        return 0;
    }
    if (!started) {
        printf("%s: thread_start failed\n", OFINDEX_THREADS);
        return 1;
    }
    long long sum = 0, count = 0;
    mutex_lock(&ch.mu);
    for (;;) {
        while (ch.slot < 0 && !ch.closed)
            cond_wait(&ch.cv, &ch.mu);
        if (ch.slot < 0)
            break;
        sum += ch.slot;
        count++;
        ch.slot = -1;
        cond_broadcast(&ch.cv);
    }
    mutex_unlock(&ch.mu);
    thread_join(&thread);
    cond_destroy(&ch.cv);
    mutex_destroy(&ch.mu);
    long long want = (long long)VALUES * (VALUES + 1) / 2;
    if (count != VALUES || sum != want) {
        printf("%s: got %lld values summing to %lld, want %d and %lld\n", OFINDEX_THREADS, count,
               sum, VALUES, want);
        return 1;
    }
    printf("%s: %lld values handed over\n", OFINDEX_THREADS, count);
    return 0;
}

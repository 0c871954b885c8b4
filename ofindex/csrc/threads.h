/* The few thread primitives the compiled module uses, on every platform it is built for.
 *
 * Two places start a helper thread: checker.c (a run's CRCs checked ahead of its reader) and
 * batches.c (a big batch checked while its objects are made). Both already work without one:
 * when thread_start() fails they check inline, with the same results and errors. This header
 * maps the primitives onto
 *   - POSIX threads (Linux, macOS, the BSDs),
 *   - the Windows API (SRW locks and condition variables, Windows Vista and later; MSVC has
 *     no pthreads), or
 *   - nothing, when built with -DOFINDEX_NO_THREADS or on a platform with neither: then
 *     thread_start() always fails and the callers take their inline paths (the test command
 *     builds the module this way too, tests/native/test_native_portable.py).
 * OFINDEX_THREADS names the branch in use; the module exposes it as ``_native.threads``.
 *
 * Plain C with no Python: tests/kit/native_threads_check.c compiles it alone (for Windows, too).
 */
#ifndef OFINDEX_THREADS_H
#define OFINDEX_THREADS_H

#if defined(OFINDEX_NO_THREADS)
#define OFINDEX_THREADS "none"
#elif defined(_WIN32)
#define OFINDEX_THREADS "win32"
#elif defined(__unix__) || defined(__APPLE__)
#define OFINDEX_THREADS "pthreads"
#else
#define OFINDEX_THREADS "none"
#endif

/* A thread's body: what pthread_create and _beginthreadex both can call through a shim. */
typedef void (*thread_body)(void *arg);

#if defined(_WIN32) && !defined(OFINDEX_NO_THREADS)
#include <windows.h>
#include <process.h>

typedef struct { HANDLE handle; thread_body body; void *arg; } thread_t;
typedef SRWLOCK mutex_t;
typedef CONDITION_VARIABLE cond_t;

static inline unsigned __stdcall thread_trampoline(void *self) {
    thread_t *t = (thread_t *)self;
    t->body(t->arg);
    return 0;
}
/* 0 when the thread runs; t must stay where it is until thread_join. */
static inline int thread_start(thread_t *t, thread_body body, void *arg) {
    t->body = body;
    t->arg = arg;
    t->handle = (HANDLE)_beginthreadex(NULL, 0, thread_trampoline, t, 0, NULL);
    return t->handle == NULL ? -1 : 0;
}
static inline void thread_join(thread_t *t) {
    WaitForSingleObject(t->handle, INFINITE);
    CloseHandle(t->handle);
}
static inline void mutex_init(mutex_t *m) { InitializeSRWLock(m); }
static inline void mutex_destroy(mutex_t *m) { (void)m; }  /* SRW locks hold no resources */
static inline void mutex_lock(mutex_t *m) { AcquireSRWLockExclusive(m); }
static inline void mutex_unlock(mutex_t *m) { ReleaseSRWLockExclusive(m); }
static inline void cond_init(cond_t *c) { InitializeConditionVariable(c); }
static inline void cond_destroy(cond_t *c) { (void)c; }
static inline void cond_wait(cond_t *c, mutex_t *m) {
    SleepConditionVariableSRW(c, m, INFINITE, 0);
}
static inline void cond_broadcast(cond_t *c) { WakeAllConditionVariable(c); }
/* Windows has no fork(): a process is always the one that started its threads. */
static inline long process_id(void) { return (long)GetCurrentProcessId(); }

#elif !defined(OFINDEX_NO_THREADS) && (defined(__unix__) || defined(__APPLE__))
#include <pthread.h>
#include <unistd.h>

typedef struct { pthread_t handle; thread_body body; void *arg; } thread_t;
typedef pthread_mutex_t mutex_t;
typedef pthread_cond_t cond_t;

static inline void *thread_trampoline(void *self) {
    thread_t *t = (thread_t *)self;
    t->body(t->arg);
    return NULL;
}
static inline int thread_start(thread_t *t, thread_body body, void *arg) {
    t->body = body;
    t->arg = arg;
    return pthread_create(&t->handle, NULL, thread_trampoline, t) == 0 ? 0 : -1;
}
static inline void thread_join(thread_t *t) { pthread_join(t->handle, NULL); }
static inline void mutex_init(mutex_t *m) { pthread_mutex_init(m, NULL); }
static inline void mutex_destroy(mutex_t *m) { pthread_mutex_destroy(m); }
static inline void mutex_lock(mutex_t *m) { pthread_mutex_lock(m); }
static inline void mutex_unlock(mutex_t *m) { pthread_mutex_unlock(m); }
static inline void cond_init(cond_t *c) { pthread_cond_init(c, NULL); }
static inline void cond_destroy(cond_t *c) { pthread_cond_destroy(c); }
static inline void cond_wait(cond_t *c, mutex_t *m) { pthread_cond_wait(c, m); }
static inline void cond_broadcast(cond_t *c) { pthread_cond_broadcast(c); }
/* A forked child sees its parent's thread_t but not the thread: callers compare this. */
static inline long process_id(void) { return (long)getpid(); }

#else  /* no threads: thread_start fails, so nothing else is ever waited on */
typedef struct { int unused; } thread_t;
typedef struct { int unused; } mutex_t;
typedef struct { int unused; } cond_t;

static inline int thread_start(thread_t *t, thread_body body, void *arg) {
    (void)t;
    (void)body;
    (void)arg;
    return -1;
}
static inline void thread_join(thread_t *t) { (void)t; }
static inline void mutex_init(mutex_t *m) { (void)m; }
static inline void mutex_destroy(mutex_t *m) { (void)m; }
static inline void mutex_lock(mutex_t *m) { (void)m; }
static inline void mutex_unlock(mutex_t *m) { (void)m; }
static inline void cond_init(cond_t *c) { (void)c; }
static inline void cond_destroy(cond_t *c) { (void)c; }
static inline void cond_wait(cond_t *c, mutex_t *m) { (void)c; (void)m; }
static inline void cond_broadcast(cond_t *c) { (void)c; }
static inline long process_id(void) { return 0; }
#endif

#endif

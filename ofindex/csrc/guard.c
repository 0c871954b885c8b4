/* Reads of memory maps whose file shrinks under them: an error, not a dead process.
 *
 * A page of a map past its file's end (the file was truncated, or rewritten in place, after
 * it was mapped) raises SIGBUS when it is touched: by default the process dies without a
 * message. Every read of mapped data here runs in a guarded call (guard_copy, guard_run):
 * a handler installed for SIGBUS jumps back out of it (siglongjmp, to the sigsetjmp of the
 * innermost guarded call of the faulting thread), which then reports the fault; the caller
 * raises StaleIndexError naming the file (map_fault), and reads nothing more from the map.
 * A SIGBUS outside a guarded call goes to whatever handled it before (the default: the
 * process dies, as it would have). Guarded calls take no lock and make no Python call, so
 * jumping out of one leaves nothing half done; they run with or without the GIL, on any
 * thread. guard_ensure() installs the handler again when something replaced it (PyTorch's
 * DataLoader workers install their own when they start).
 *
 * A guarded call costs a sigsetjmp without the signal mask (a few ns); the handler is
 * installed with SA_NODEFER, so that jumping out leaves SIGBUS unblocked. Without POSIX
 * signals (Windows), the calls run unguarded. */
#include "native.h"

#if defined(__unix__) || defined(__APPLE__)
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#define GUARD_SIGBUS 1
#else
#define GUARD_SIGBUS 0
#endif

#if GUARD_SIGBUS
typedef struct GuardFrame {
    sigjmp_buf env;
    struct GuardFrame *prev;
} GuardFrame;

/* This thread's innermost guarded call, or NULL; and the address its last fault touched.
 * Initial-exec: one load from the thread pointer, not a __tls_get_addr call per access (a
 * guarded copy per record: 5-10 ns of a record's 40-180 ns otherwise); two pointers fit the
 * static TLS room glibc keeps for modules loaded later. */
#if defined(__GNUC__)
#define GUARD_TLS _Thread_local __attribute__((tls_model("initial-exec")))
#else
#define GUARD_TLS _Thread_local
#endif
static GUARD_TLS GuardFrame *volatile guard_top = NULL;
static GUARD_TLS const void *volatile last_fault = NULL;

/* Make this thread's innermost guarded call `frame`: the store is volatile (the handler reads
 * it, not the code around it: a compiler otherwise drops it) and fenced, so that it is done
 * before the guarded reads start, and undone only after they end. */
static inline void guard_enter(GuardFrame *frame) {
    guard_top = frame;
    atomic_signal_fence(memory_order_seq_cst);
}

static inline void guard_leave(GuardFrame *frame) {
    atomic_signal_fence(memory_order_seq_cst);
    guard_top = frame->prev;
}
/* What handled SIGBUS before this module: called for a fault outside a guarded call. */
static struct sigaction previous;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    GuardFrame *frame = guard_top;
    if (frame != NULL) {
        last_fault = info != NULL ? info->si_addr : NULL;
        siglongjmp(frame->env, 1);
    }
    if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != NULL) {
        previous.sa_sigaction(sig, info, context);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* the default action: the faulting access runs again and the process dies, as it did
     * without this module (a SIGBUS sent by kill() is raised again) */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (info == NULL || info->si_code <= 0)
        raise(sig);
}

int guard_ensure(void) {
    struct sigaction now;
    if (sigaction(SIGBUS, NULL, &now) != 0)
        return -1;
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus)
        return 0;
    struct sigaction ours;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = on_sigbus;
    ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    if (sigaction(SIGBUS, &ours, NULL) != 0)
        return -1;
    previous = now;  /* (after: a fault meanwhile still goes to what was there) */
    return 0;
}

int guard_copy(void *dst, const void *src, size_t n) {
    GuardFrame frame;
    frame.prev = guard_top;
    if (sigsetjmp(frame.env, 0) != 0) {
        guard_top = frame.prev;
        return -1;
    }
    guard_enter(&frame);
    memcpy(dst, src, n);
    guard_leave(&frame);
    return 0;
}

const void *guard_last_fault(void) { return last_fault; }

Py_ssize_t guard_run(Py_ssize_t (*fn)(void *), void *arg) {
    GuardFrame frame;
    frame.prev = guard_top;
    if (sigsetjmp(frame.env, 0) != 0) {
        guard_top = frame.prev;
        return GUARD_FAULT;
    }
    guard_enter(&frame);
    Py_ssize_t result = fn(arg);
    guard_leave(&frame);
    return result;
}
#else
int guard_ensure(void) { return 0; }

const void *guard_last_fault(void) { return NULL; }

int guard_copy(void *dst, const void *src, size_t n) {
    memcpy(dst, src, n);
    return 0;
}

Py_ssize_t guard_run(Py_ssize_t (*fn)(void *), void *arg) { return fn(arg); }
#endif

#if GUARD_SIGBUS
int guard_copy3(unsigned char *head, unsigned char *payload, unsigned char *foot,
                const unsigned char *src, size_t header, size_t size, size_t footer) {
    GuardFrame frame;  /* one guarded call for the three pieces (a sigsetjmp each otherwise) */
    frame.prev = guard_top;
    if (sigsetjmp(frame.env, 0) != 0) {
        guard_top = frame.prev;
        return -1;
    }
    guard_enter(&frame);
    memcpy(head, src, header);
    memcpy(payload, src + header, size);
    if (footer)
        memcpy(foot, src + header + size, footer);
    guard_leave(&frame);
    return 0;
}
#else
int guard_copy3(unsigned char *head, unsigned char *payload, unsigned char *foot,
                const unsigned char *src, size_t header, size_t size, size_t footer) {
    memcpy(head, src, header);
    memcpy(payload, src + header, size);
    if (footer)
        memcpy(foot, src + header + size, footer);
    return 0;
}
#endif

/* The file a buffer maps, as its owner names it (ofindex's maps carry their path), or NULL
 * (no exception set). */
static PyObject *path_of(PyObject *owner) {
    for (int depth = 0; owner != NULL && depth < 2; depth++) {
        PyObject *path = PyObject_GetAttrString(owner, "path");
        if (path != NULL && PyUnicode_Check(path))
            return path;
        Py_XDECREF(path);
        PyErr_Clear();
        /* a memoryview of a map: the map it views */
        owner = PyMemoryView_Check(owner) ? PyMemoryView_GET_BUFFER(owner)->obj : NULL;
    }
    return NULL;
}

PyObject *map_fault(PyObject *owner) {
    PyObject *errors = PyImport_ImportModule("ofindex.errors");
    PyObject *kind = errors != NULL ? PyObject_GetAttrString(errors, "StaleIndexError") : NULL;
    Py_XDECREF(errors);
    if (kind == NULL)
        return NULL;
    PyObject *path = path_of(owner);
    PyObject *message;
    if (path != NULL)
        message = PyUnicode_FromFormat(
            "%U: the data file changed while it was read: pages of its memory map are gone "
            "(it was truncated, or rewritten in place, since it was opened), and nothing more "
            "is read from them; if it was rewritten, rebuild its index (`ofindex build %U`) "
            "and reopen the dataset; write files by rename (as ofindex.Writer does), or open "
            "files that change in place with mmap=False", path, path);
    else
        message = PyUnicode_FromString(
            "a memory-mapped file changed while it was read: pages of its map are gone (it "
            "was truncated, or rewritten in place, since it was opened), and nothing more is "
            "read from them; reopen the dataset");
    Py_XDECREF(path);
    if (message != NULL)
        PyErr_SetObject(kind, message);
    Py_XDECREF(message);
    Py_DECREF(kind);
    return NULL;
}

const char guard_sigbus_doc[] =
"guard_sigbus() -> bool\n\n"
"Install the handler that turns a fault reading a memory map of a shrunk file into an error\n"
"(again, when something replaced it); False where there are no such signals.";

PyObject *guard_sigbus(PyObject *self, PyObject *unused) {
    if (guard_ensure() != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyBool_FromLong(GUARD_SIGBUS);
}

const char copy_out_doc[] =
"copy_out(buf, start, end) -> bytes\n\n"
"buf[start:end] (clamped to buf) as bytes, copied in a guarded call: a memory map whose file\n"
"shrank raises StaleIndexError naming the file instead of killing the process.";

PyObject *copy_out(PyObject *self, PyObject *args) {
    PyObject *buf_obj;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "Onn:copy_out", &buf_obj, &start, &end))
        return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(buf_obj, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    start = start < 0 ? 0 : start > buf.len ? buf.len : start;
    end = end < start ? start : end > buf.len ? buf.len : end;
    PyObject *out = PyBytes_FromStringAndSize(NULL, end - start);
    if (out != NULL && guard_copy(PyBytes_AS_STRING(out), (const char *)buf.buf + start,
                                  (size_t)(end - start)) < 0) {
        Py_CLEAR(out);
        map_fault(buf.obj);
    }
    PyBuffer_Release(&buf);
    return out;
}

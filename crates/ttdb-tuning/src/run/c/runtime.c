/* runtime.c: what a model built by `ttdb build` needs at run time, linked into libmodel.so:
 * the parallel launch the kernels call (`ttdb_parallel_for`, the same ABI and the same chunk
 * boundaries as ttdb's in-process runtime, so results are bit-identical), a thread pool per
 * model handle, the instruction-set check, and the C interface of ttdb_model.h executing
 * the plan model.c describes. */
#define _GNU_SOURCE
#include "ttdb_model.h"
#include "ttdb_plan.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

enum { STATUS_OK = 0, STATUS_ABORTED = 1, STATUS_NO_MEMORY = 2 };

/* A parallel loop body: i32 body(ptr ptrs, ptr vars, i64 begin, i64 end, ptr scratch,
 * ptr abort). */
typedef int32_t (*body_fn)(void *const *ptrs, const int64_t *vars, int64_t begin, int64_t end,
                           uint8_t *scratch, const int32_t *abort);

/* One thread's share of a launch, chunks next..end: its owner claims them in order and a
 * thread done with its own share takes from the others' (codegen/pool.rs says why). A
 * cache-line pair each, so an owner's claims stay in its own cache until someone steals. */
struct share {
    int64_t next; /* atomic */
    int64_t end;
} __attribute__((aligned(128)));

struct job {
    body_fn body;
    void *const *ptrs;
    const int64_t *vars;
    int64_t extent, chunks, scratch_bytes;
    const int32_t *abort;
    struct share *shares; /* one per thread: 0 the caller, k the k-th worker to join */
    int num_shares;
    int32_t status; /* the worst chunk status (atomic) */
};

/* The pool's protocol is that of ttdb's in-process pool (codegen/pool.rs): a launch
 * publishes its job and a new generation in `state` (generation << 16 | CLOSED | joined);
 * workers join the generation, claim chunks, and leave; when its own chunks are done the
 * caller closes the generation (no later joins) and waits for the joined workers to leave.
 * Idle workers spin for a while before they park, as OpenMP's and TVM's do: a model's
 * kernels launch back to back, many times a millisecond, and waking a parked worker through
 * the kernel costs as much as a small kernel (a pool that always parks made a built
 * distilbert 17% slower than `ttdb run`). */
#define CLOSED ((uint64_t)1 << 15)
#define JOINED (CLOSED - 1)
/* Pause hints an idle worker spins before it parks (0.3-1.5 ms), and a caller before it
 * parks waiting for its workers (a worker pre-empted in its last chunk needs the core). */
#define IDLE_SPIN (1u << 15)
#define WAIT_SPIN (1u << 12)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

struct ttdb_model {
    int threads;
    pthread_t *workers;
    int num_workers;
    uint64_t state;     /* atomic: generation << 16 | CLOSED | joined workers */
    struct job *job;    /* atomic: the current launch's job */
    uint64_t left;      /* atomic: joined workers that have left the current launch */
    int sleepers;       /* atomic: parked workers */
    int stop;           /* atomic */
    int waiting;        /* atomic: the caller is parked until the last worker leaves */
    pthread_mutex_t mu; /* parking of idle workers, with `wake` */
    pthread_cond_t wake;
    pthread_mutex_t wait_mu; /* parking of the caller, with `done` */
    pthread_cond_t done;
    int in_launch;
    const unsigned char *weights; /* the shared huge-page copy, or the embedded weights */
    uint8_t *arena;
    uint8_t *scratch;
    void **args;
    int32_t abort;
    struct share *shares; /* `threads` of them, reused by every launch */
};

/* This thread's scratch block for parallel chunks, reused from launch to launch (generated
 * code zeroes each temporary where it is allocated). Taken while chunks run, so that a
 * nested launch run inline gets a block of its own. */
static __thread uint8_t *chunk_block;
static __thread size_t chunk_block_len;

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static void status_max(int32_t *status, int32_t s) {
    int32_t cur = __atomic_load_n(status, __ATOMIC_RELAXED);
    while (s > cur &&
           !__atomic_compare_exchange_n(status, &cur, s, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void run_chunks(struct job *j, int own) {
    size_t need = j->scratch_bytes > 0 ? round64((size_t)j->scratch_bytes) : 0;
    uint8_t *block = chunk_block;
    size_t len = chunk_block_len;
    chunk_block = NULL;
    chunk_block_len = 0;
    if (len < need) {
        free(block);
        block = aligned_alloc(64, need);
        len = block ? need : 0;
        if (!block) {
            status_max(&j->status, STATUS_NO_MEMORY);
            return;
        }
    }
    /* its own share first, then the others' in turn */
    for (int k = 0; k < j->num_shares; k++) {
        struct share *sh = &j->shares[(own + k) % j->num_shares];
        for (;;) {
            int64_t c = __atomic_fetch_add(&sh->next, 1, __ATOMIC_RELAXED);
            if (c >= sh->end)
                break;
            /* in 128 bits: extent * c overflows 64 for extents near its range */
            int64_t begin = (int64_t)((__int128)j->extent * c / j->chunks);
            int64_t end = (int64_t)((__int128)j->extent * (c + 1) / j->chunks);
            int32_t r = j->body(j->ptrs, j->vars, begin, end, block, j->abort);
            if (r != STATUS_OK)
                status_max(&j->status, r);
        }
    }
    if (chunk_block_len >= len) {
        free(block);
    } else {
        free(chunk_block);
        chunk_block = block;
        chunk_block_len = len;
    }
}

/* Waits for a generation after `seen` (spinning, then parked); returns its state, or 0 when
 * the model closes. */
static uint64_t next_generation(struct ttdb_model *m, uint64_t seen) {
    unsigned spins = 0;
    for (;;) {
        uint64_t st = __atomic_load_n(&m->state, __ATOMIC_ACQUIRE);
        if ((st >> 16) != seen)
            return st;
        if (__atomic_load_n(&m->stop, __ATOMIC_RELAXED))
            return 0;
        if (spins < IDLE_SPIN) {
            spins++;
            cpu_relax();
            continue;
        }
        /* The caller publishes the generation, then looks for sleepers; a worker counts
         * itself a sleeper, then looks at the generation (both sequentially consistent):
         * one of the two sees the other, and the wake-up is sent under `mu`. */
        pthread_mutex_lock(&m->mu);
        __atomic_add_fetch(&m->sleepers, 1, __ATOMIC_SEQ_CST);
        while ((__atomic_load_n(&m->state, __ATOMIC_SEQ_CST) >> 16) == seen &&
               !__atomic_load_n(&m->stop, __ATOMIC_SEQ_CST))
            pthread_cond_wait(&m->wake, &m->mu);
        __atomic_sub_fetch(&m->sleepers, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&m->mu);
        spins = 0;
    }
}

static void *worker(void *arg) {
    struct ttdb_model *m = arg;
    uint64_t seen = 0;
    for (;;) {
        uint64_t st = next_generation(m, seen);
        if (st == 0 && __atomic_load_n(&m->stop, __ATOMIC_SEQ_CST))
            break;
        seen = st >> 16;
        if (st & CLOSED)
            continue;
        /* join, unless the caller closed the generation in between */
        if (!__atomic_compare_exchange_n(&m->state, &st, st + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            /* another worker joined first: retry this generation, unless it closed */
            if ((st >> 16) == seen && !(st & CLOSED))
                seen--;
            continue;
        }
        /* the caller keeps the job alive until every worker that joined has left */
        /* the k-th worker to join takes share k (the caller has share 0) */
        run_chunks(__atomic_load_n(&m->job, __ATOMIC_ACQUIRE), (int)(st & JOINED) + 1);
        __atomic_add_fetch(&m->left, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&m->waiting, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&m->wait_mu);
            pthread_cond_signal(&m->done);
            pthread_mutex_unlock(&m->wait_mu);
        }
    }
    free(chunk_block);
    return NULL;
}

/* Called by generated code: runs body over [0, extent) split into 4 chunks per thread, in
 * one contiguous share of chunks per thread (taken from each other when one is done). */
API int32_t ttdb_parallel_for(void *rtctx, body_fn body, void *const *ptrs, const int64_t *vars,
                              int64_t extent, int64_t scratch_bytes, const int32_t *abort) {
    if (extent <= 0)
        return STATUS_OK;
    struct ttdb_model *m = rtctx;
    int64_t chunks = m->threads <= 1 ? 1 : (int64_t)m->threads * 4;
    if (chunks > extent)
        chunks = extent;
    struct share inline_share = {0, chunks};
    struct job j = {body, ptrs, vars, extent, chunks, scratch_bytes, abort, &inline_share, 1,
                    STATUS_OK};
    if (m->num_workers == 0 || chunks <= 1 || __atomic_load_n(&m->in_launch, __ATOMIC_RELAXED)) {
        run_chunks(&j, 0); /* one thread, one chunk, or a launch nested in a chunk: inline */
        return j.status;
    }
    int t = m->num_workers + 1;
    for (int k = 0; k < t; k++) {
        m->shares[k].next = chunks * k / t;
        m->shares[k].end = chunks * (k + 1) / t;
    }
    j.shares = m->shares;
    j.num_shares = t;
    __atomic_store_n(&m->in_launch, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&m->left, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&m->job, &j, __ATOMIC_RELAXED);
    uint64_t generation = (__atomic_load_n(&m->state, __ATOMIC_RELAXED) >> 16) + 1;
    __atomic_store_n(&m->state, generation << 16, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&m->sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&m->mu);
        pthread_cond_broadcast(&m->wake);
        pthread_mutex_unlock(&m->mu);
    }
    run_chunks(&j, 0);
    uint64_t joined = __atomic_fetch_or(&m->state, CLOSED, __ATOMIC_SEQ_CST) & JOINED;
    for (unsigned spins = 0; __atomic_load_n(&m->left, __ATOMIC_ACQUIRE) < joined; spins++) {
        if (spins < WAIT_SPIN) {
            cpu_relax();
            continue;
        }
        /* as with the sleepers: the caller says it waits, then looks at `left`; the last
         * worker adds itself to `left`, then looks whether the caller waits */
        pthread_mutex_lock(&m->wait_mu);
        __atomic_store_n(&m->waiting, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&m->left, __ATOMIC_SEQ_CST) < joined)
            pthread_cond_wait(&m->done, &m->wait_mu);
        __atomic_store_n(&m->waiting, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&m->wait_mu);
    }
    __atomic_store_n(&m->in_launch, 0, __ATOMIC_RELAXED);
    return j.status;
}

/* Memory in transparent huge pages. A run streams every weight once and the intermediates
 * through the arena: in 4 KiB pages each page is a TLB miss (ttdb's own process runs its
 * models from huge pages too, through jemalloc's `thp:always`: ResNet-50 3% faster). */
#define HUGE_PAGE ((size_t)2 << 20)

static size_t round_huge(size_t n) { return (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1); }

/* Zeroed, 64-byte aligned heap memory of `bytes` (at least one line); NULL when out of
 * memory. Freed with free(). */
static void *zeroed(size_t bytes) {
    size_t len = round64(bytes ? bytes : 1);
    void *p = aligned_alloc(64, len);
    if (p)
        memset(p, 0, len);
    return p;
}

/* Zeroed memory of `bytes`: below a huge page from the heap, above it mapped at a huge-page
 * boundary and advised into huge pages (a no-op where the kernel has them off). NULL when
 * out of memory. Freed by huge_free with the same size. */
static void *huge_alloc(size_t bytes) {
    if (bytes < HUGE_PAGE)
        return zeroed(bytes);
    size_t len = round_huge(bytes);
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    /* keep the huge-page aligned `len` bytes inside; unmap the head and the tail around it */
    size_t head = (HUGE_PAGE - (uintptr_t)raw % HUGE_PAGE) % HUGE_PAGE;
    uint8_t *p = raw + head;
    if (head)
        munmap(raw, head);
    munmap(p + len, HUGE_PAGE - head);
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}

static void huge_free(void *p, size_t bytes) {
    if (!p)
        return;
    if (bytes < HUGE_PAGE)
        free(p);
    else
        munmap(p, round_huge(bytes));
}

/* The weights in huge pages: one copy per process, shared by its handles (a handle per
 * thread must not multiply the weights), freed with the last one. The embedded pages are
 * then given back (they stay in the page cache), so the copy does not double the memory. */
static pthread_mutex_t weights_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *weights_copy;
static int weights_users;

static const unsigned char *weights_acquire(void) {
    const struct ttdb_plan *p = &ttdb_model_plan;
    if (p->weights_bytes < HUGE_PAGE)
        return p->weights;
    pthread_mutex_lock(&weights_mu);
    if (!weights_copy) {
        weights_copy = huge_alloc(p->weights_bytes);
        if (weights_copy) {
            memcpy(weights_copy, p->weights, p->weights_bytes);
            long page = sysconf(_SC_PAGESIZE);
            if (page > 0) {
                uintptr_t from = ((uintptr_t)p->weights + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
                uintptr_t to = ((uintptr_t)p->weights + p->weights_bytes) & ~(uintptr_t)(page - 1);
                if (to > from)
                    madvise((void *)from, to - from, MADV_DONTNEED);
            }
        }
    }
    if (weights_copy)
        weights_users++;
    const unsigned char *w = weights_copy ? weights_copy : p->weights;
    pthread_mutex_unlock(&weights_mu);
    return w;
}

static void weights_release(const unsigned char *w) {
    if (!w || w == ttdb_model_plan.weights)
        return;
    pthread_mutex_lock(&weights_mu);
    if (--weights_users == 0) {
        huge_free(weights_copy, ttdb_model_plan.weights_bytes);
        weights_copy = NULL;
    }
    pthread_mutex_unlock(&weights_mu);
}

static void say(char *error, size_t len, const char *fmt, ...) {
    if (!error || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error, len, fmt, ap);
    va_end(ap);
}

/* 1 if this CPU has feature `f`, 0 if not, -1 if this runtime cannot tell. */
static int cpu_has(const char *f) {
    __builtin_cpu_init();
#define CHECK(name)                                                                            \
    if (!strcmp(f, name))                                                                      \
        return __builtin_cpu_supports(name) != 0;
    CHECK("popcnt") CHECK("sse3") CHECK("ssse3") CHECK("sse4.1") CHECK("sse4.2") CHECK("avx")
    CHECK("avx2") CHECK("fma") CHECK("f16c") CHECK("bmi") CHECK("bmi2") CHECK("avx512f")
    CHECK("avx512vl") CHECK("avx512bw") CHECK("avx512dq") CHECK("avx512cd")
    CHECK("avx512vnni") CHECK("avx512ifma") CHECK("avx512vbmi") CHECK("avx512vbmi2")
    CHECK("avx512bf16") CHECK("avx512bitalg") CHECK("avx512vpopcntdq") CHECK("avxvnni")
#undef CHECK
    return -1;
}

/* Whether `f` is an entry of the comma-separated `list`. */
static int listed(const char *list, const char *f) {
    size_t n = strlen(f);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, f, n))
            return 1;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

API const char *ttdb_model_isa(void) { return ttdb_model_plan.isa; }

API void ttdb_model_close(ttdb_model *m) {
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    __atomic_store_n(&m->stop, 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&m->wake);
    pthread_mutex_unlock(&m->mu);
    for (int i = 0; i < m->num_workers; i++)
        pthread_join(m->workers[i], NULL);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->wait_mu);
    pthread_cond_destroy(&m->done);
    free(m->workers);
    weights_release(m->weights);
    huge_free(m->arena, ttdb_model_plan.arena_bytes);
    free(m->scratch);
    free(m->args);
    free(m->shares);
    free(m);
}

API ttdb_model *ttdb_model_open(int threads, const char *host_isa, char *error,
                                size_t error_len) {
    const struct ttdb_plan *p = &ttdb_model_plan;
    /* before anything runs: a kernel compiled for an extension this host lacks would die of
     * SIGILL. The missing extension comes first: the feature lists fill a short buffer. */
    for (int i = 0; i < p->num_features; i++) {
        const char *f = p->features[i];
        int has = host_isa ? listed(host_isa, f) : cpu_has(f);
        if (has == 0) {
            say(error, error_len,
                "the host lacks `%s`, which this library was compiled for (%s; host: %s)", f,
                p->isa, host_isa ? host_isa : "this CPU");
            return NULL;
        }
    }
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    ttdb_model *m = calloc(1, sizeof *m);
    if (!m) {
        say(error, error_len, "out of memory");
        return NULL;
    }
    m->threads = threads;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->wake, NULL);
    pthread_mutex_init(&m->wait_mu, NULL);
    pthread_cond_init(&m->done, NULL);
    uint64_t scratch = 0;
    int32_t max_args = 1;
    for (int i = 0; i < p->num_steps; i++) {
        if (p->steps[i].scratch_bytes > scratch)
            scratch = p->steps[i].scratch_bytes;
        if (p->steps[i].num_args > max_args)
            max_args = p->steps[i].num_args;
    }
    m->arena = p->arena_bytes ? huge_alloc(p->arena_bytes) : NULL;
    m->weights = weights_acquire();
    m->scratch = scratch ? zeroed(scratch) : NULL;
    m->args = calloc((size_t)max_args, sizeof(void *));
    m->workers = calloc((size_t)threads, sizeof(pthread_t));
    m->shares = aligned_alloc(128, (size_t)threads * sizeof(struct share));
    if ((p->arena_bytes && !m->arena) || (scratch && !m->scratch) || !m->args || !m->workers ||
        !m->shares) {
        ttdb_model_close(m);
        say(error, error_len, "out of memory for the %llu byte arena",
            (unsigned long long)p->arena_bytes);
        return NULL;
    }
    for (int i = 0; i + 1 < threads; i++) {
        if (pthread_create(&m->workers[i], NULL, worker, m) != 0)
            break;
        m->num_workers++;
    }
    return m;
}

static const struct ttdb_port *port(const struct ttdb_port *ports, int n, int i) {
    return i >= 0 && i < n ? &ports[i] : NULL;
}
#define IN(i) port(ttdb_model_plan.inputs, ttdb_model_plan.num_inputs, i)
#define OUT(i) port(ttdb_model_plan.outputs, ttdb_model_plan.num_outputs, i)

API int ttdb_model_num_inputs(const ttdb_model *m) {
    (void)m;
    return ttdb_model_plan.num_inputs;
}
API int ttdb_model_num_outputs(const ttdb_model *m) {
    (void)m;
    return ttdb_model_plan.num_outputs;
}
API const char *ttdb_model_input_name(const ttdb_model *m, int i) {
    (void)m;
    return IN(i) ? IN(i)->name : NULL;
}
API int ttdb_model_input_rank(const ttdb_model *m, int i) {
    (void)m;
    return IN(i) ? IN(i)->rank : 0;
}
API const int64_t *ttdb_model_input_shape(const ttdb_model *m, int i) {
    (void)m;
    return IN(i) ? IN(i)->shape : NULL;
}
API int ttdb_model_input_dtype(const ttdb_model *m, int i) {
    (void)m;
    return IN(i) ? IN(i)->dtype : 0;
}
API size_t ttdb_model_input_bytes(const ttdb_model *m, int i) {
    (void)m;
    return IN(i) ? (size_t)IN(i)->bytes : 0;
}
API const char *ttdb_model_output_name(const ttdb_model *m, int i) {
    (void)m;
    return OUT(i) ? OUT(i)->name : NULL;
}
API int ttdb_model_output_rank(const ttdb_model *m, int i) {
    (void)m;
    return OUT(i) ? OUT(i)->rank : 0;
}
API const int64_t *ttdb_model_output_shape(const ttdb_model *m, int i) {
    (void)m;
    return OUT(i) ? OUT(i)->shape : NULL;
}
API int ttdb_model_output_dtype(const ttdb_model *m, int i) {
    (void)m;
    return OUT(i) ? OUT(i)->dtype : 0;
}
API size_t ttdb_model_output_bytes(const ttdb_model *m, int i) {
    (void)m;
    return OUT(i) ? (size_t)OUT(i)->bytes : 0;
}

static void *address(ttdb_model *m, struct ttdb_slot s, const void *const *inputs,
                     void *const *outputs) {
    switch (s.kind) {
    case TTDB_SLOT_INPUT:
        return (void *)inputs[s.index]; /* read only: kernels never store to inputs */
    case TTDB_SLOT_CONSTANT:
        return (void *)(m->weights + s.offset); /* read only, as above */
    case TTDB_SLOT_ARENA:
        return m->arena + s.offset;
    default:
        return outputs[s.index];
    }
}

API int ttdb_model_run(ttdb_model *m, const void *const *inputs, void *const *outputs,
                       char *error, size_t error_len) {
    const struct ttdb_plan *p = &ttdb_model_plan;
    if (!m || (p->num_inputs && !inputs) || (p->num_outputs && !outputs)) {
        say(error, error_len, "ttdb_model_run: a NULL model, inputs or outputs");
        return -1;
    }
    for (int i = 0; i < p->num_inputs; i++)
        if (!inputs[i] && p->inputs[i].bytes) {
            say(error, error_len, "input %d (`%s`) is NULL", i, p->inputs[i].name);
            return -1;
        }
    for (int k = 0; k < p->num_outputs; k++)
        if (!outputs[k] && p->outputs[k].bytes) {
            say(error, error_len, "output %d (`%s`) is NULL", k, p->outputs[k].name);
            return -1;
        }
    for (int i = 0; i < p->num_steps; i++) {
        const struct ttdb_step *s = &p->steps[i];
        for (int a = 0; a < s->num_args; a++)
            m->args[a] = address(m, s->args[a], inputs, outputs);
        int32_t status = s->kernel(m->args, m->scratch, &m->abort, m);
        if (status != STATUS_OK) {
            say(error, error_len, "step %d (`%s`) failed with status %d%s", i, s->name,
                (int)status, status == STATUS_NO_MEMORY ? " (out of memory)" : "");
            return status;
        }
    }
    for (int c = 0; c < p->num_copies; c++) {
        const struct ttdb_copy *cp = &p->copies[c];
        memcpy(outputs[cp->output], address(m, cp->from, inputs, outputs),
               (size_t)p->outputs[cp->output].bytes);
    }
    return 0;
}

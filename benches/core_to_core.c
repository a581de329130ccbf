/* core_to_core.c: the round trip of a cache line between CPUs 0 and 1, in ns (benches/e2e.sh).
 *
 *   cc -O2 -pthread benches/core_to_core.c -o core_to_core && ./core_to_core
 *
 * Two threads, pinned to CPU 0 and CPU 1, hand a counter back and forth 100000 times. On the
 * 2-vCPU VMs of these sessions (AMD EPYC) the answer is bimodal: 50-75 ns when the hypervisor
 * runs the two vCPUs on one die (they share the L3), 310-450 ns when it runs them on two (no
 * shared cache), and the placement changes every few tens of seconds. A model runs up to 2x
 * slower on two dies (mobilenet_v2 6.3 against 3.4 ms, onnxruntime alike), so a comparison
 * is only fair between runs on the same placement. Prints the round trip in whole ns. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define ROUND_TRIPS 100000L

static _Atomic long baton __attribute__((aligned(128)));

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Answers each odd value with the next even one. */
static void *answer(void *arg) {
    (void)arg;
    pin(1);
    for (long i = 0; i < ROUND_TRIPS; i++) {
        while (atomic_load_explicit(&baton, memory_order_acquire) != 2 * i + 1)
            ;
        atomic_store_explicit(&baton, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

int main(void) {
    if (pin(0) != 0) {
        fprintf(stderr, "core_to_core: cannot pin to CPU 0\n");
        return 1;
    }
    pthread_t other;
    if (pthread_create(&other, NULL, answer, NULL) != 0) {
        fprintf(stderr, "core_to_core: cannot start a thread\n");
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < ROUND_TRIPS; i++) {
        atomic_store_explicit(&baton, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&baton, memory_order_acquire) != 2 * i + 2)
            ;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(other, NULL);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("%.0f\n", ns / ROUND_TRIPS);
    return 0;
}

/* time_built.c: time a model built by `ttdb build` (benches/built_vs_run.sh).
 *
 *   cc benches/time_built.c -I DIR -L DIR -lmodel -o time_built
 *   LD_LIBRARY_PATH=DIR ./time_built THREADS REPEAT
 *
 * Runs the model once to warm up, then REPEAT times on inputs of small deterministic values
 * (integer inputs: zeros, valid token ids); prints the median and p90 in ms. */
#include "ttdb_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: time_built THREADS REPEAT\n");
        return 2;
    }
    int threads = atoi(argv[1]), repeat = atoi(argv[2]);
    if (repeat < 1)
        repeat = 1;
    char error[512];
    ttdb_model *m = ttdb_model_open(threads, NULL, error, sizeof error);
    if (!m) {
        fprintf(stderr, "cannot open the model: %s\n", error);
        return 1;
    }
    int ni = ttdb_model_num_inputs(m), no = ttdb_model_num_outputs(m);
    void **in = calloc((size_t)ni, sizeof *in), **out = calloc((size_t)no, sizeof *out);
    for (int i = 0; i < ni; i++) {
        size_t n = ttdb_model_input_bytes(m, i);
        in[i] = calloc(1, n + 1);
        if (ttdb_model_input_dtype(m, i) == TTDB_FLOAT32)
            for (size_t k = 0; k < n / 4; k++)
                ((float *)in[i])[k] = (float)(k % 17) / 16.0f - 0.5f;
    }
    for (int k = 0; k < no; k++)
        out[k] = calloc(1, ttdb_model_output_bytes(m, k) + 1);
    double *ms = calloc((size_t)repeat, sizeof *ms);
    for (int r = -1; r < repeat; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (ttdb_model_run(m, (const void *const *)in, out, error, sizeof error)) {
            fprintf(stderr, "run failed: %s\n", error);
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (r >= 0)
            ms[r] = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    }
    qsort(ms, (size_t)repeat, sizeof *ms, by_value);
    printf("%.3f %.3f\n", ms[repeat / 2], ms[(repeat * 9) / 10 < repeat ? (repeat * 9) / 10 : repeat - 1]);
    ttdb_model_close(m);
    return 0;
}

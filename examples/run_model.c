/* run_model.c: load a model built by `ttdb build`, run it once, print its outputs.
 *
 *   ttdb build model.onnx -o out
 *   cc examples/run_model.c -I out -L out -lmodel -o run_model
 *   LD_LIBRARY_PATH=out ./run_model [INPUT.bin ...]
 *
 * Each INPUT.bin holds one input's raw little-endian values, in input order (zeros for an
 * input not given). Each output is printed (name, shape, first values) and written raw to
 * output<k>.bin in the current folder. */
#include "ttdb_model.h"

#include <stdio.h>
#include <stdlib.h>

static int read_exactly(const char *path, void *buf, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t got = fread(buf, 1, bytes, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != bytes || extra) {
        fprintf(stderr, "%s: expected exactly %zu bytes\n", path, bytes);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    char error[512];
    ttdb_model *m = ttdb_model_open(0, NULL, error, sizeof error);
    if (!m) {
        fprintf(stderr, "cannot open the model: %s\n", error);
        return 1;
    }
    int ni = ttdb_model_num_inputs(m), no = ttdb_model_num_outputs(m);
    void **in = calloc((size_t)ni, sizeof *in), **out = calloc((size_t)no, sizeof *out);
    for (int i = 0; i < ni; i++) {
        in[i] = calloc(1, ttdb_model_input_bytes(m, i) + 1);
        if (i + 1 < argc && read_exactly(argv[i + 1], in[i], ttdb_model_input_bytes(m, i)))
            return 1;
    }
    for (int k = 0; k < no; k++)
        out[k] = calloc(1, ttdb_model_output_bytes(m, k) + 1);
    if (ttdb_model_run(m, (const void *const *)in, out, error, sizeof error)) {
        fprintf(stderr, "run failed: %s\n", error);
        return 1;
    }
    for (int k = 0; k < no; k++) {
        printf("%s [", ttdb_model_output_name(m, k));
        for (int d = 0; d < ttdb_model_output_rank(m, k); d++)
            printf("%s%lld", d ? ", " : "", (long long)ttdb_model_output_shape(m, k)[d]);
        printf("]:");
        size_t n = ttdb_model_output_bytes(m, k);
        int dtype = ttdb_model_output_dtype(m, k);
        for (size_t j = 0; j < 5 && j * 4 < n; j++) {
            if (dtype == TTDB_FLOAT32)
                printf(" %g", (double)((float *)out[k])[j]);
            else if (dtype == TTDB_INT64 && j * 8 < n)
                printf(" %lld", (long long)((long long *)out[k])[j]);
        }
        printf("\n");
        char name[64];
        snprintf(name, sizeof name, "output%d.bin", k);
        FILE *f = fopen(name, "wb");
        if (!f || fwrite(out[k], 1, n, f) != n) {
            perror(name);
            return 1;
        }
        fclose(f);
    }
    ttdb_model_close(m);
    return 0;
}

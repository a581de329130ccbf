/* ttdb_model.h: the C interface of a model built by `ttdb build` (libmodel.so).
 *
 * A model handle owns its weights (inside the library), one arena for the intermediate
 * tensors and a pool of worker threads. Runs on one handle must not overlap; open one handle
 * per thread to run concurrently. Inputs and outputs are caller-owned, dense, row-major
 * buffers of the shapes and dtypes the metadata functions report; an output buffer must not
 * overlap an input buffer.
 */
#ifndef TTDB_MODEL_H
#define TTDB_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, numbered as ONNX's TensorProto.DataType. */
#define TTDB_FLOAT32 1
#define TTDB_INT64 7

typedef struct ttdb_model ttdb_model;

/* Opens the model. `threads` <= 0 uses every online core. `host_isa` NULL checks this CPU
 * (cpuid); otherwise it is a comma-separated feature list ("sse4.2,avx,avx2,fma") taken as
 * the host's. Returns NULL with a message in `error` (when not NULL) if the host lacks an
 * instruction set extension the kernels were compiled for, or memory runs out. */
ttdb_model *ttdb_model_open(int threads, const char *host_isa, char *error, size_t error_len);
void ttdb_model_close(ttdb_model *model);

/* What the kernels were compiled for: "cpu: +feature,+feature,...". */
const char *ttdb_model_isa(void);

int ttdb_model_num_inputs(const ttdb_model *model);
int ttdb_model_num_outputs(const ttdb_model *model);
/* Port metadata; `i` out of range gives NULL / 0. */
const char *ttdb_model_input_name(const ttdb_model *model, int i);
int ttdb_model_input_rank(const ttdb_model *model, int i);
const int64_t *ttdb_model_input_shape(const ttdb_model *model, int i);
int ttdb_model_input_dtype(const ttdb_model *model, int i);
size_t ttdb_model_input_bytes(const ttdb_model *model, int i);
const char *ttdb_model_output_name(const ttdb_model *model, int i);
int ttdb_model_output_rank(const ttdb_model *model, int i);
const int64_t *ttdb_model_output_shape(const ttdb_model *model, int i);
int ttdb_model_output_dtype(const ttdb_model *model, int i);
size_t ttdb_model_output_bytes(const ttdb_model *model, int i);

/* Runs the model: `inputs[i]` and `outputs[k]` point to the caller's buffers, in port
 * order. Returns 0, or a non-zero status with a message in `error` (when not NULL). */
int ttdb_model_run(ttdb_model *model, const void *const *inputs, void *const *outputs,
                   char *error, size_t error_len);

#ifdef __cplusplus
}
#endif
#endif

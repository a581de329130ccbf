/* ttdb_plan.h: the tables `ttdb build` generates (model.c) and the runtime (runtime.c)
 * executes. Internal to the library; the public interface is ttdb_model.h. */
#ifndef TTDB_PLAN_H
#define TTDB_PLAN_H
#include <stddef.h>
#include <stdint.h>

/* A kernel entry: i32 kernel(ptr bufs, ptr scratch, ptr abort, ptr rtctx); 0 = ok. */
typedef int32_t (*ttdb_kernel_fn)(void *const *bufs, uint8_t *scratch, const int32_t *abort,
                                  void *rtctx);

enum ttdb_slot_kind { TTDB_SLOT_INPUT, TTDB_SLOT_CONSTANT, TTDB_SLOT_ARENA, TTDB_SLOT_OUTPUT };

/* Where one kernel argument lives: input/output/constant `index`, or `offset` bytes into
 * the arena (constants: `offset` bytes into the weights). */
struct ttdb_slot {
    int32_t kind;
    int32_t index;
    uint64_t offset;
};

struct ttdb_step {
    ttdb_kernel_fn kernel;
    const char *name;
    int32_t num_args;
    const struct ttdb_slot *args;
    uint64_t scratch_bytes;
};

struct ttdb_port {
    const char *name;
    int32_t rank;
    const int64_t *shape;
    int32_t dtype;
    uint64_t bytes;
};

/* An output no kernel writes, copied from `from` after the steps. */
struct ttdb_copy {
    int32_t output;
    struct ttdb_slot from;
};

struct ttdb_plan {
    const char *isa;
    int32_t num_features;
    const char *const *features;
    int32_t num_steps;
    const struct ttdb_step *steps;
    int32_t num_inputs;
    const struct ttdb_port *inputs;
    int32_t num_outputs;
    const struct ttdb_port *outputs;
    int32_t num_copies;
    const struct ttdb_copy *copies;
    uint64_t arena_bytes;
    const unsigned char *weights;
    uint64_t weights_bytes;
};

extern const struct ttdb_plan ttdb_model_plan;
#endif

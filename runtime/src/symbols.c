/* The runtime's functions by name, for a JIT to define in the symbol table of generated code. */
#include "kiln/runtime.h"

static const kiln_runtime_symbol kSymbols[] = {
    {"kiln_parallel_launch", (kiln_runtime_fn)kiln_parallel_launch},
    {"kiln_runtime_threads", (kiln_runtime_fn)kiln_runtime_threads},
    {"kiln_runtime_default_threads", (kiln_runtime_fn)kiln_runtime_default_threads},
    {"kiln_runtime_set_threads", (kiln_runtime_fn)kiln_runtime_set_threads},
    {"kiln_runtime_pinned", (kiln_runtime_fn)kiln_runtime_pinned},
    {"kiln_now_ns", (kiln_runtime_fn)kiln_now_ns},
    {"kiln_cache_flush", (kiln_runtime_fn)kiln_cache_flush},
    {"kiln_alloc", (kiln_runtime_fn)kiln_alloc},
    {"kiln_free", (kiln_runtime_fn)kiln_free},
    {NULL, NULL},
};

const kiln_runtime_symbol* kiln_runtime_symbols(void) { return kSymbols; }

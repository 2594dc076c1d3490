/* A whole model compiled by kiln: its shared object (every kernel, and the plan that strings them
   together), its weights blob, loaded and run. The plan's text format is in runtime/README.md. */
#define _POSIX_C_SOURCE 200809L /* strtok_r, strdup */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"
#include "kiln/sha256.h"

enum { KIND_INPUT, KIND_OUTPUT, KIND_CONST, KIND_ARENA };
enum { MAX_RANK = 16, MAX_CALL_ARGS = 1024 };

typedef struct {
  kiln_model_tensor pub; /* what kiln_model_input and kiln_model_output give */
  int kind;
  int64_t index; /* inputs and outputs: the position among them */
  uint64_t offset;
  int64_t dims[MAX_RANK];
  char dtype[8];
} tensor_t;

typedef struct {
  int is_param;
  int64_t value; /* a param's value, or a tensor's index */
} arg_t;

typedef struct {
  int64_t kernel;
  int32_t nargs;
  arg_t* args;
} call_t;

typedef struct {
  int64_t dst, src;
} copy_t;

struct kiln_model {
  void* so;
  char* plan; /* a copy of the plan's text, cut into the names the tensors point at */
  kiln_entry_fn* kernels;
  int64_t nkernels;
  tensor_t* tensors;
  int64_t ntensors;
  int64_t* inputs; /* tensor indices, in input order */
  int64_t ninputs;
  int64_t* outputs;
  int64_t noutputs;
  call_t* calls;
  int64_t ncalls;
  copy_t* copies;
  int64_t ncopies;
  char name[256];
  void* weights;
  uint64_t weights_bytes;
  char weights_sha256[65];
  void* arena;
  uint64_t arena_bytes;
  kiln_value* argv; /* one call's packed arguments */
  char batch[256];  /* the run-time batch's name, "" for none */
  int64_t* batched; /* the inputs (by their position among inputs) that hold one sample */
  int64_t nbatched;
  const void** sample_inputs; /* one sample's input and output pointers in a batched run */
  void** sample_outputs;
  char error[1024];
};

static void say(char* error, size_t size, const char* format, ...) {
  if (error == NULL || size == 0) return;
  va_list ap;
  va_start(ap, format);
  vsnprintf(error, size, format, ap);
  va_end(ap);
}

/* Undoes the plan's escaping of a name in place: %XX is the byte 0xXX. */
static void unescape(char* s) {
  char* out = s;
  for (const char* p = s; *p; ++p) {
    if (p[0] == '%' && p[1] && p[2]) {
      char hex[3] = {p[1], p[2], 0};
      *out++ = (char)strtol(hex, NULL, 16);
      p += 2;
    } else {
      *out++ = *p;
    }
  }
  *out = '\0';
}

static int parse_i64(const char* word, int64_t* out) {
  if (word == NULL || *word == '\0') return -1;
  char* end = NULL;
  errno = 0;
  long long v = strtoll(word, &end, 10);
  if (errno != 0 || *end != '\0') return -1;
  *out = (int64_t)v;
  return 0;
}

static int kind_of(const char* word) {
  if (word == NULL) return -1;
  if (strcmp(word, "input") == 0) return KIND_INPUT;
  if (strcmp(word, "output") == 0) return KIND_OUTPUT;
  if (strcmp(word, "const") == 0) return KIND_CONST;
  if (strcmp(word, "arena") == 0) return KIND_ARENA;
  return -1;
}

static void* grow(void* p, int64_t count, size_t each) {
  /* Doubling at powers of two: count is the number held before this one is added. */
  if (count != 0 && (count & (count - 1)) != 0) return p;
  return realloc(p, (size_t)(count == 0 ? 1 : 2 * count) * each);
}

/* Parses the plan's lines into m. Returns 0, or -1 with m->error saying which line and why. */
static int parse_plan(kiln_model* m, char* text) {
  int64_t lineno = 0;
  char* save_line = NULL;
  int ended = 0;
  for (char* line = strtok_r(text, "\n", &save_line); line != NULL;
       line = strtok_r(NULL, "\n", &save_line)) {
    ++lineno;
    char* save = NULL;
    const char* word = strtok_r(line, " ", &save);
    if (word == NULL) continue;
#define NEXT() strtok_r(NULL, " ", &save)
#define BAD(why)                                                                           \
  do {                                                                                     \
    say(m->error, sizeof m->error, "the model's plan, line %" PRId64 ": %s", lineno, why); \
    return -1;                                                                             \
  } while (0)
    int64_t v = 0;
    if (lineno == 1) {
      if (strcmp(word, "kiln-model") != 0 || parse_i64(NEXT(), &v) != 0)
        BAD("not a kiln model plan");
      if (v != 1) BAD("a plan of another version of kiln (this runtime reads version 1)");
    } else if (strcmp(word, "name") == 0) {
      const char* n = NEXT();
      if (n == NULL) BAD("a name line without a name");
      snprintf(m->name, sizeof m->name, "%s", n);
      unescape(m->name);
    } else if (strcmp(word, "weights") == 0) {
      if (parse_i64(NEXT(), &v) != 0 || v < 0) BAD("weights: expected BYTES SHA256");
      m->weights_bytes = (uint64_t)v;
      const char* sha = NEXT();
      if (sha == NULL || strlen(sha) != 64) BAD("weights: expected BYTES SHA256");
      snprintf(m->weights_sha256, sizeof m->weights_sha256, "%s", sha);
    } else if (strcmp(word, "arena") == 0) {
      if (parse_i64(NEXT(), &v) != 0 || v < 0) BAD("arena: expected BYTES");
      m->arena_bytes = (uint64_t)v;
    } else if (strcmp(word, "kernels") == 0) {
      if (parse_i64(NEXT(), &v) != 0 || v < 0) BAD("kernels: expected COUNT");
      m->nkernels = v;
    } else if (strcmp(word, "batch") == 0) {
      const char* n = NEXT();
      if (n == NULL || parse_i64(NEXT(), &v) != 0 || v < 0 || v > 1000000)
        BAD("batch: expected NAME COUNT INPUT...");
      snprintf(m->batch, sizeof m->batch, "%s", n);
      unescape(m->batch);
      m->batched = calloc((size_t)(v ? v : 1), sizeof *m->batched);
      if (m->batched == NULL) BAD("out of memory");
      for (m->nbatched = 0; m->nbatched < v; ++m->nbatched) {
        if (parse_i64(NEXT(), &m->batched[m->nbatched]) != 0 || m->batched[m->nbatched] < 0)
          BAD("batch: expected NAME COUNT INPUT...");
      }
    } else if (strcmp(word, "tensor") == 0) {
      m->tensors = grow(m->tensors, m->ntensors, sizeof *m->tensors);
      if (m->tensors == NULL) BAD("out of memory");
      tensor_t* t = &m->tensors[m->ntensors];
      memset(t, 0, sizeof *t);
      int64_t bytes = 0, rank = 0, offset = 0;
      t->kind = kind_of(NEXT());
      if (t->kind < 0 || parse_i64(NEXT(), &t->index) != 0 || parse_i64(NEXT(), &offset) != 0 ||
          parse_i64(NEXT(), &bytes) != 0 || offset < 0 || bytes < 0)
        BAD("tensor: expected KIND INDEX OFFSET BYTES DTYPE RANK DIMS... NAME");
      const char* dtype = NEXT();
      if (dtype == NULL || strlen(dtype) >= sizeof t->dtype || parse_i64(NEXT(), &rank) != 0 ||
          rank < 0 || rank > MAX_RANK)
        BAD("tensor: expected a dtype and a rank of at most 16");
      snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
      for (int64_t d = 0; d < rank; ++d)
        if (parse_i64(NEXT(), &t->dims[d]) != 0 || t->dims[d] < 0) BAD("tensor: a bad extent");
      char* name = (char*)NEXT();
      if (name == NULL) BAD("tensor: no name");
      unescape(name);
      t->offset = (uint64_t)offset;
      t->pub.name = name; /* into the plan's copy; dtype and shape once the array is final */
      t->pub.rank = (int32_t)rank;
      t->pub.bytes = (size_t)bytes;
      uint64_t limit = t->kind == KIND_CONST   ? m->weights_bytes
                       : t->kind == KIND_ARENA ? m->arena_bytes
                                               : UINT64_MAX;
      if ((t->kind == KIND_CONST || t->kind == KIND_ARENA) &&
          (t->offset > limit || (uint64_t)bytes > limit - t->offset))
        BAD("tensor: past the end of the weights or the arena");
      if (t->kind == KIND_INPUT || t->kind == KIND_OUTPUT) {
        int64_t** list = t->kind == KIND_INPUT ? &m->inputs : &m->outputs;
        int64_t* count = t->kind == KIND_INPUT ? &m->ninputs : &m->noutputs;
        if (t->index != *count) BAD("tensor: inputs and outputs out of order");
        *list = grow(*list, *count, sizeof **list);
        if (*list == NULL) BAD("out of memory");
        (*list)[(*count)++] = m->ntensors;
      }
      ++m->ntensors;
    } else if (strcmp(word, "call") == 0) {
      m->calls = grow(m->calls, m->ncalls, sizeof *m->calls);
      if (m->calls == NULL) BAD("out of memory");
      call_t* c = &m->calls[m->ncalls];
      memset(c, 0, sizeof *c);
      int64_t nargs = 0;
      if (parse_i64(NEXT(), &c->kernel) != 0 || c->kernel < 0 || c->kernel >= m->nkernels ||
          parse_i64(NEXT(), &nargs) != 0 || nargs < 0 || nargs > MAX_CALL_ARGS)
        BAD("call: expected KERNEL NARGS ARGS...");
      ++m->ncalls; /* counted now, so that close frees its arguments */
      c->nargs = (int32_t)nargs;
      c->args = calloc((size_t)(nargs ? nargs : 1), sizeof *c->args);
      if (c->args == NULL) BAD("out of memory");
      for (int64_t a = 0; a < nargs; ++a) {
        const char* arg = NEXT();
        if (arg == NULL || (arg[0] != 'p' && arg[0] != 't') || arg[1] != '=' ||
            parse_i64(arg + 2, &c->args[a].value) != 0)
          BAD("call: an argument is p=VALUE or t=TENSOR");
        c->args[a].is_param = arg[0] == 'p';
        if (!c->args[a].is_param && (c->args[a].value < 0 || c->args[a].value >= m->ntensors))
          BAD("call: a tensor that is not in the plan");
      }
    } else if (strcmp(word, "copy") == 0) {
      m->copies = grow(m->copies, m->ncopies, sizeof *m->copies);
      if (m->copies == NULL) BAD("out of memory");
      copy_t* c = &m->copies[m->ncopies];
      if (parse_i64(NEXT(), &c->dst) != 0 || parse_i64(NEXT(), &c->src) != 0 || c->dst < 0 ||
          c->src < 0 || c->dst >= m->ntensors || c->src >= m->ntensors ||
          m->tensors[c->dst].pub.bytes != m->tensors[c->src].pub.bytes)
        BAD("copy: expected two tensors of the plan of one size");
      ++m->ncopies;
    } else if (strcmp(word, "end") == 0) {
      ended = 1;
      break;
    } else {
      BAD("an unknown line");
    }
#undef NEXT
#undef BAD
  }
  if (!ended) {
    say(m->error, sizeof m->error, "the model's plan is cut short (no 'end' line)");
    return -1;
  }
  /* The array moved as it grew: point into its final place now. */
  for (int64_t k = 0; k < m->ntensors; ++k) {
    tensor_t* t = &m->tensors[k];
    t->pub.dtype = t->dtype;
    t->pub.shape = t->dims;
    t->pub.batched = t->kind == KIND_OUTPUT && m->batch[0] != '\0';
    for (int64_t b = 0; t->kind == KIND_INPUT && b < m->nbatched; ++b) {
      if (m->batched[b] == t->index) t->pub.batched = 1;
    }
  }
  for (int64_t b = 0; b < m->nbatched; ++b) {
    int found = 0;
    for (int64_t k = 0; k < m->ntensors; ++k)
      found |= m->tensors[k].kind == KIND_INPUT && m->tensors[k].index == m->batched[b];
    if (!found) {
      say(m->error, sizeof m->error,
          "the model's plan: batch: input %" PRId64 " is not an input of the plan", m->batched[b]);
      return -1;
    }
  }
  return 0;
}

/* The weights in m->weights checked against the SHA-256 the plan gives; `what` names them. */
static int check_weights(kiln_model* m, const char* what) {
  uint8_t raw[32];
  char digest[65];
  kiln_sha256(m->weights, m->weights_bytes, raw);
  kiln_hex(raw, sizeof raw, digest);
  if (strcmp(digest, m->weights_sha256) != 0) {
    say(m->error, sizeof m->error,
        "the weights %s are not this model's: their SHA-256 is %s, the model needs %s", what,
        digest, m->weights_sha256);
    return -1;
  }
  return 0;
}

/* Room for the weights, aligned to 64 bytes. */
static int allocate_weights(kiln_model* m) {
  m->weights = kiln_alloc(m->weights_bytes ? m->weights_bytes : 1, 64);
  if (m->weights == NULL) {
    say(m->error, sizeof m->error, "cannot allocate %" PRIu64 " bytes for the weights",
        m->weights_bytes);
    return -1;
  }
  return 0;
}

/* The weights blob into memory, checked against the size and SHA-256 the plan gives. */
static int read_weights(kiln_model* m, const char* path) {
  if (allocate_weights(m) != 0) return -1;
  if (m->weights_bytes == 0) return 0;
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    say(m->error, sizeof m->error, "cannot open the weights %s: %s", path, strerror(errno));
    return -1;
  }
  size_t got = fread(m->weights, 1, m->weights_bytes, f);
  int more = fgetc(f) != EOF;
  fclose(f);
  if (got != m->weights_bytes || more) {
    say(m->error, sizeof m->error,
        "the weights %s are not this model's: it needs %" PRIu64 " bytes, the file %s", path,
        m->weights_bytes, more ? "holds more" : "holds fewer");
    return -1;
  }
  return check_weights(m, path);
}

/* What every open ends with: the arena the intermediate tensors share and the room for one
   call's arguments. */
static int finish_open(kiln_model* m) {
  m->arena = kiln_alloc(m->arena_bytes ? m->arena_bytes : 1, 64);
  int32_t most = 1;
  for (int64_t c = 0; c < m->ncalls; ++c)
    if (m->calls[c].nargs > most) most = m->calls[c].nargs;
  m->argv = calloc((size_t)most, sizeof *m->argv);
  m->sample_inputs = calloc((size_t)(m->ninputs + 1), sizeof *m->sample_inputs);
  m->sample_outputs = calloc((size_t)(m->noutputs + 1), sizeof *m->sample_outputs);
  if (m->arena == NULL || m->argv == NULL || m->sample_inputs == NULL ||
      m->sample_outputs == NULL) {
    say(m->error, sizeof m->error, "cannot allocate the model's %" PRIu64 " bytes of tensors",
        m->arena_bytes);
    return -1;
  }
  m->error[0] = '\0';
  return 0;
}

/* The plan's text copied into m and parsed. */
static int take_plan(kiln_model* m, const char* plan) {
  m->plan = strdup(plan);
  if (m->plan == NULL) {
    say(m->error, sizeof m->error, "out of memory");
    return -1;
  }
  return parse_plan(m, m->plan);
}

kiln_model* kiln_model_from_image(const char* plan, kiln_entry_fn const* kernels,
                                  const void* weights, size_t weights_bytes, char* error,
                                  size_t error_size) {
  if (plan == NULL || kernels == NULL || (weights == NULL && weights_bytes > 0)) {
    say(error, error_size, "kiln_model_from_image: no plan, kernels or weights given");
    return NULL;
  }
  kiln_model* m = calloc(1, sizeof *m);
  if (m == NULL) {
    say(error, error_size, "out of memory");
    return NULL;
  }
  m->kernels = (kiln_entry_fn*)kernels;
  int ok = take_plan(m, plan) == 0;
  if (ok && weights_bytes != m->weights_bytes) {
    say(m->error, sizeof m->error,
        "the weights given are not this model's: it needs %" PRIu64 " bytes, %zu were given",
        m->weights_bytes, weights_bytes);
    ok = 0;
  }
  if (ok) ok = allocate_weights(m) == 0;
  if (ok && weights_bytes > 0) memcpy(m->weights, weights, weights_bytes);
  ok = ok && check_weights(m, "given") == 0 && finish_open(m) == 0;
  if (!ok) {
    say(error, error_size, "%s", m->error);
    kiln_model_close(m);
    return NULL;
  }
  return m;
}

/* SO's path with ".so" replaced by ".weights" (or ".weights" added). */
static char* weights_beside(const char* so_path) {
  size_t n = strlen(so_path);
  if (n >= 3 && strcmp(so_path + n - 3, ".so") == 0) n -= 3;
  char* path = malloc(n + sizeof ".weights");
  if (path == NULL) return NULL;
  memcpy(path, so_path, n);
  memcpy(path + n, ".weights", sizeof ".weights");
  return path;
}

kiln_model* kiln_model_open(const char* so_path, const char* weights_path, char* error,
                            size_t error_size) {
  if (so_path == NULL) {
    say(error, error_size, "no model given");
    return NULL;
  }
  kiln_model* m = calloc(1, sizeof *m);
  if (m == NULL) {
    say(error, error_size, "out of memory");
    return NULL;
  }
  /* Kernels call libm (expf, ...) by name: make it visible to the model even when the program
     itself did not link it. */
  dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL);
  char* beside = NULL;
  int ok = 0;
  do {
    /* A bare file name is a file here, not a library for dlopen to look for on its path. */
    char* local = NULL;
    if (strchr(so_path, '/') == NULL && (local = malloc(strlen(so_path) + 3)) != NULL) {
      memcpy(local, "./", 2);
      memcpy(local + 2, so_path, strlen(so_path) + 1);
    }
    m->so = dlopen(local != NULL ? local : so_path, RTLD_NOW | RTLD_LOCAL);
    free(local);
    if (m->so == NULL) {
      const char* why = dlerror();
      say(m->error, sizeof m->error, "cannot load the model %s: %s%s", so_path,
          why ? why : "unknown error",
          why && strstr(why, "undefined symbol: kiln_")
              ? " (link kiln's runtime into the program with -Wl,--whole-archive "
                "libkiln_runtime.a -Wl,--no-whole-archive -rdynamic)"
              : "");
      break;
    }
    const char* plan = (const char*)dlsym(m->so, "kiln_model_plan");
    void* kernels = dlsym(m->so, "kiln_model_kernels");
    if (plan == NULL || kernels == NULL) {
      say(m->error, sizeof m->error,
          "%s is not a kiln model: it has no kiln_model_plan or kiln_model_kernels (a single "
          "kernel's shared object is loaded with dlopen and called through its entry)",
          so_path);
      break;
    }
    m->kernels = (kiln_entry_fn*)kernels;
    if (take_plan(m, plan) != 0) break;
    if (weights_path == NULL) {
      beside = weights_beside(so_path);
      weights_path = beside;
    }
    if (weights_path == NULL || read_weights(m, weights_path) != 0) break;
    if (finish_open(m) != 0) break;
    ok = 1;
  } while (0);
  free(beside);
  if (!ok) {
    say(error, error_size, "%s", m->error);
    kiln_model_close(m);
    return NULL;
  }
  return m;
}

void kiln_model_close(kiln_model* m) {
  if (m == NULL) return;
  for (int64_t c = 0; c < m->ncalls; ++c) free(m->calls[c].args);
  free(m->calls);
  free(m->copies);
  free(m->tensors);
  free(m->inputs);
  free(m->outputs);
  free(m->argv);
  free(m->batched);
  free(m->sample_inputs);
  free(m->sample_outputs);
  free(m->plan);
  kiln_free(m->weights);
  kiln_free(m->arena);
  if (m->so != NULL) dlclose(m->so);
  free(m);
}

const char* kiln_model_name(const kiln_model* m) { return m->name; }
int32_t kiln_model_num_inputs(const kiln_model* m) { return (int32_t)m->ninputs; }
int32_t kiln_model_num_outputs(const kiln_model* m) { return (int32_t)m->noutputs; }

const kiln_model_tensor* kiln_model_input(const kiln_model* m, int32_t i) {
  return i >= 0 && i < m->ninputs ? &m->tensors[m->inputs[i]].pub : NULL;
}

const kiln_model_tensor* kiln_model_output(const kiln_model* m, int32_t i) {
  return i >= 0 && i < m->noutputs ? &m->tensors[m->outputs[i]].pub : NULL;
}

size_t kiln_model_arena_bytes(const kiln_model* m) { return (size_t)m->arena_bytes; }
const char* kiln_model_batch(const kiln_model* m) { return m->batch[0] ? m->batch : NULL; }
size_t kiln_model_weights_bytes(const kiln_model* m) { return (size_t)m->weights_bytes; }
const char* kiln_model_error(const kiln_model* m) { return m->error; }

static void* address(kiln_model* m, const tensor_t* t, const void* const* inputs,
                     void* const* outputs) {
  switch (t->kind) {
    case KIND_INPUT:
      return (void*)inputs[t->index];
    case KIND_OUTPUT:
      return outputs[t->index];
    case KIND_CONST:
      return (char*)m->weights + t->offset;
    default:
      return (char*)m->arena + t->offset;
  }
}

int32_t kiln_model_run(kiln_model* m, const void* const* inputs, void* const* outputs) {
  if (m == NULL) return KILN_ERR_ARGS;
  m->error[0] = '\0';
  if ((m->ninputs > 0 && inputs == NULL) || (m->noutputs > 0 && outputs == NULL)) {
    say(m->error, sizeof m->error, "kiln_model_run: no %s array given",
        inputs == NULL ? "input" : "output");
    return KILN_ERR_ARGS;
  }
  for (int64_t i = 0; i < m->ninputs + m->noutputs; ++i) {
    int is_input = i < m->ninputs;
    int64_t k = is_input ? i : i - m->ninputs;
    const void* p = is_input ? inputs[k] : outputs[k];
    if (p == NULL && m->tensors[is_input ? m->inputs[k] : m->outputs[k]].pub.bytes > 0) {
      say(m->error, sizeof m->error, "kiln_model_run: %s %" PRId64 " (%s) is NULL",
          is_input ? "input" : "output", k,
          m->tensors[is_input ? m->inputs[k] : m->outputs[k]].pub.name);
      return KILN_ERR_ARGS;
    }
  }
  for (int64_t c = 0; c < m->ncalls; ++c) {
    const call_t* call = &m->calls[c];
    for (int32_t a = 0; a < call->nargs; ++a) {
      if (call->args[a].is_param)
        m->argv[a].i64 = call->args[a].value;
      else
        m->argv[a].ptr = address(m, &m->tensors[call->args[a].value], inputs, outputs);
    }
    int32_t status = m->kernels[call->kernel](m->argv, call->nargs);
    if (status != KILN_OK) {
      say(m->error, sizeof m->error,
          "call %" PRId64 " of %" PRId64 " (kernel %" PRId64 ") returned status %d%s", c + 1,
          m->ncalls, call->kernel, status,
          status >= KILN_ERR_CHECK ? ": a check of the kernel failed (the model's .json lists "
                                     "its checks)"
                                   : "");
      return status;
    }
  }
  for (int64_t c = 0; c < m->ncopies; ++c) {
    const tensor_t* dst = &m->tensors[m->copies[c].dst];
    const tensor_t* src = &m->tensors[m->copies[c].src];
    if (dst->pub.bytes > 0)
      memmove(address(m, dst, inputs, outputs), address(m, src, inputs, outputs), dst->pub.bytes);
  }
  return KILN_OK;
}

int32_t kiln_model_run_batch(kiln_model* m, int64_t n, const void* const* inputs,
                             void* const* outputs) {
  if (m == NULL) return KILN_ERR_ARGS;
  if (n < 0 || (n != 1 && m->batch[0] == '\0')) {
    say(m->error, sizeof m->error,
        n < 0 ? "kiln_model_run_batch: a batch of %" PRId64 " samples"
              : "kiln_model_run_batch: a batch of %" PRId64
                " samples, but the model's shapes are static (it was compiled without a "
                "run-time batch)",
        n);
    return KILN_ERR_ARGS;
  }
  if ((m->ninputs > 0 && inputs == NULL) || (m->noutputs > 0 && outputs == NULL)) {
    return kiln_model_run(m, inputs, outputs); /* says which */
  }
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t k = 0; k < m->ninputs; ++k) {
      const kiln_model_tensor* t = &m->tensors[m->inputs[k]].pub;
      m->sample_inputs[k] =
          t->batched && inputs[k] ? (const char*)inputs[k] + (size_t)b * t->bytes : inputs[k];
    }
    for (int64_t k = 0; k < m->noutputs; ++k) {
      const kiln_model_tensor* t = &m->tensors[m->outputs[k]].pub;
      m->sample_outputs[k] = outputs[k] ? (char*)outputs[k] + (size_t)b * t->bytes : NULL;
    }
    int32_t status = kiln_model_run(m, m->sample_inputs, m->sample_outputs);
    if (status != KILN_OK) {
      char why[sizeof m->error];
      snprintf(why, sizeof why, "%s", m->error);
      say(m->error, sizeof m->error, "sample %" PRId64 " of %" PRId64 ": %s", b, n, why);
      return status;
    }
  }
  return KILN_OK;
}

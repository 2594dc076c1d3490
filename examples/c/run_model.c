/* Runs a model kiln compiled (`kiln compile resnet18.onnx` -> resnet18.so, resnet18.weights):
   a C program that links only libc and kiln's runtime. Inputs come from .npy files (or are made
   up), outputs go to .npy files; with --runs it times the model. A model with a run-time batch
   (kiln_model_batch) runs on as many samples as the first batched input's file holds, or as
   --batch says.

   usage: run_model MODEL.so [--weights FILE] [--input NAME=FILE.npy]... [--save DIR] [--runs N]
                    [--batch N]

   Build (docs/models.md):
     cc -O2 -I runtime/include run_model.c -o run_model \
        -Wl,--whole-archive libkiln_runtime.a -Wl,--no-whole-archive -rdynamic -lpthread
   The model's kernels call the runtime (its thread pool) by name: --whole-archive keeps all of
   it in the program and -rdynamic exports it to them.

   Exit status: 0 ok, 1 bad usage or input, 2 the model cannot be opened, 3 it failed to run. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"

enum { MAX_INPUTS = 64, HEADER_MAX = 4096 };

/* The .npy descr of a kiln dtype (little-endian, as x86-64 and aarch64 are). */
static const char* npy_descr(const char* dtype) {
  if (strcmp(dtype, "f32") == 0) return "<f4";
  if (strcmp(dtype, "f64") == 0) return "<f8";
  if (strcmp(dtype, "i32") == 0) return "<i4";
  if (strcmp(dtype, "i64") == 0) return "<i8";
  if (strcmp(dtype, "bool") == 0) return "|b1";
  return NULL;
}

/* Reads a C-order .npy file of t's dtype and shape into data. Returns 0, or -1 after saying
   why. */
static int read_npy(const char* path, const kiln_model_tensor* t, void* data) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "run_model: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  unsigned char head[10];
  char header[HEADER_MAX + 1];
  int ok = fread(head, 1, 10, f) == 10 && memcmp(head, "\x93NUMPY", 6) == 0 && head[6] == 1;
  size_t len = ok ? (size_t)head[8] | ((size_t)head[9] << 8) : 0;
  ok = ok && len <= HEADER_MAX && fread(header, 1, len, f) == len;
  if (!ok) {
    fprintf(stderr, "run_model: %s is not a version 1 .npy file\n", path);
    fclose(f);
    return -1;
  }
  header[len] = '\0';
  /* The shape as the header writes it: "(1, 3, 224, 224)", "(5,)", "()". */
  char want[512] = "(";
  for (int32_t d = 0; d < t->rank; ++d) {
    char dim[32];
    snprintf(dim, sizeof dim, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    strncat(want, dim, sizeof want - strlen(want) - 1);
  }
  strncat(want, t->rank == 1 ? ",)" : ")", sizeof want - strlen(want) - 1);
  char descr[32];
  snprintf(descr, sizeof descr, "'descr': '%s'", npy_descr(t->dtype));
  if (strstr(header, descr) == NULL || strstr(header, "'fortran_order': False") == NULL ||
      strstr(header, want) == NULL) {
    fprintf(stderr, "run_model: %s does not hold %s %s %s in C order (its header: %s)\n", path,
            t->name, t->dtype, want, header);
    fclose(f);
    return -1;
  }
  size_t got = fread(data, 1, t->bytes, f);
  int more = fgetc(f) != EOF;
  fclose(f);
  if (got != t->bytes || more) {
    fprintf(stderr, "run_model: %s does not hold %zu bytes of data\n", path, t->bytes);
    return -1;
  }
  return 0;
}

static int write_npy(const char* path, const kiln_model_tensor* t, const void* data) {
  char header[1024];
  int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   npy_descr(t->dtype));
  for (int32_t d = 0; d < t->rank; ++d)
    n += snprintf(header + n, sizeof header - (size_t)n, "%s%" PRId64, d ? ", " : "", t->shape[d]);
  n += snprintf(header + n, sizeof header - (size_t)n, "%s), }", t->rank == 1 ? "," : "");
  /* Padded with spaces and a newline so that the data starts at a multiple of 64. */
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
  size_t len = total - 10;
  memset(header + n, ' ', len - (size_t)n - 1);
  header[len - 1] = '\n';
  unsigned char head[10] = {
      0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff), (unsigned char)(len >> 8)};
  FILE* f = fopen(path, "wb");
  if (f == NULL) {
    fprintf(stderr, "run_model: cannot create %s: %s\n", path, strerror(errno));
    return -1;
  }
  int ok = fwrite(head, 1, 10, f) == 10 && fwrite(header, 1, len, f) == len &&
           fwrite(data, 1, t->bytes, f) == t->bytes;
  if (fclose(f) != 0 || !ok) {
    fprintf(stderr, "run_model: cannot write %s\n", path);
    return -1;
  }
  return 0;
}

/* Reproducible made-up values: uniform in [-1, 1) for floats, 0 for integers. */
static void make_up(const kiln_model_tensor* t, void* data, uint64_t seed) {
  memset(data, 0, t->bytes);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  if (strcmp(t->dtype, "f32") == 0) {
    float* p = data;
    for (size_t i = 0; i < t->bytes / 4; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
    }
  } else if (strcmp(t->dtype, "f64") == 0) {
    double* p = data;
    for (size_t i = 0; i < t->bytes / 8; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = (double)(s >> 11) / 9007199254740992.0 * 2 - 1;
    }
  }
}

/* The leading extent of the array in a .npy file ("(8, 3, 224, 224)" -> 8), or -1. */
static int64_t npy_leading(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return -1;
  char header[HEADER_MAX + 1];
  size_t got = fread(header, 1, HEADER_MAX, f);
  fclose(f);
  header[got] = '\0';
  for (size_t i = 0; i < got; ++i)
    if (header[i] == '\0') header[i] = ' '; /* the magic's bytes */
  const char* shape = strstr(header, "'shape': (");
  if (shape == NULL) return -1;
  char* end = NULL;
  long long n = strtoll(shape + strlen("'shape': ("), &end, 10);
  return end != NULL && (*end == ',' || *end == ')') ? (int64_t)n : -1;
}

/* t as a batch of n samples: n times its leading extent (which is 1) and its bytes. */
typedef struct {
  kiln_model_tensor t;
  int64_t dims[16];
} view_t;

static const kiln_model_tensor* batch_view(const kiln_model_tensor* t, int64_t n, view_t* v) {
  v->t = *t;
  for (int32_t d = 0; d < t->rank && d < 16; ++d) v->dims[d] = t->shape[d];
  if (t->batched && t->rank > 0) {
    v->dims[0] *= n;
    v->t.bytes *= (size_t)n;
  }
  v->t.shape = v->dims;
  return &v->t;
}

static double element(const kiln_model_tensor* t, const void* data, size_t i) {
  if (strcmp(t->dtype, "f32") == 0) return ((const float*)data)[i];
  if (strcmp(t->dtype, "f64") == 0) return ((const double*)data)[i];
  if (strcmp(t->dtype, "i32") == 0) return ((const int32_t*)data)[i];
  if (strcmp(t->dtype, "i64") == 0) return (double)((const int64_t*)data)[i];
  return ((const unsigned char*)data)[i];
}

static size_t element_bytes(const kiln_model_tensor* t) {
  if (strcmp(t->dtype, "f64") == 0 || strcmp(t->dtype, "i64") == 0) return 8;
  if (strcmp(t->dtype, "bool") == 0) return 1;
  return 4;
}

static int usage(void) {
  fprintf(stderr,
          "usage: run_model MODEL.so [--weights FILE] [--input NAME=FILE.npy]... [--save DIR] "
          "[--runs N] [--batch N]\n");
  return 1;
}

int main(int argc, char** argv) {
  const char* so = NULL;
  const char* weights = NULL;
  const char* save = NULL;
  const char* given[MAX_INPUTS];
  int ngiven = 0;
  long runs = 0;
  int64_t batch = -1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc) {
      weights = argv[++i];
    } else if (strcmp(argv[i], "--input") == 0 && i + 1 < argc && ngiven < MAX_INPUTS) {
      given[ngiven++] = argv[++i];
    } else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc) {
      save = argv[++i];
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      char* end = NULL;
      runs = strtol(argv[++i], &end, 10);
      if (*end != '\0' || runs < 0) return usage();
    } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      char* end = NULL;
      batch = strtoll(argv[++i], &end, 10);
      if (*end != '\0' || batch < 1) return usage();
    } else if (argv[i][0] != '-' && so == NULL) {
      so = argv[i];
    } else {
      return usage();
    }
  }
  if (so == NULL) return usage();

  char error[1024];
  kiln_model* m = kiln_model_open(so, weights, error, sizeof error);
  if (m == NULL) {
    fprintf(stderr, "run_model: %s\n", error);
    return 2;
  }
  int32_t nin = kiln_model_num_inputs(m), nout = kiln_model_num_outputs(m);
  void* inputs[MAX_INPUTS] = {0};
  void* outputs[MAX_INPUTS] = {0};
  int status = 0;
  if (nin > MAX_INPUTS || nout > MAX_INPUTS) {
    fprintf(stderr, "run_model: more than %d inputs or outputs\n", MAX_INPUTS);
    status = 1;
  }
  const char* files[MAX_INPUTS] = {0};
  for (int32_t i = 0; status == 0 && i < nin; ++i) {
    const kiln_model_tensor* t = kiln_model_input(m, i);
    for (int g = 0; g < ngiven; ++g) {
      size_t n = strlen(t->name);
      if (strncmp(given[g], t->name, n) == 0 && given[g][n] == '=') files[i] = given[g] + n + 1;
    }
    if (batch < 0 && t->batched && files[i] != NULL) batch = npy_leading(files[i]);
  }
  if (batch < 0) batch = 1;
  if (batch != 1 && kiln_model_batch(m) == NULL) {
    fprintf(stderr,
            "run_model: a batch of %" PRId64 " samples, but the model's shapes are static\n",
            batch);
    status = 1;
  }
  for (int32_t i = 0; status == 0 && i < nin; ++i) {
    view_t v;
    const kiln_model_tensor* t = batch_view(kiln_model_input(m, i), batch, &v);
    inputs[i] = kiln_alloc(t->bytes, 64);
    if (files[i] != NULL) {
      if (read_npy(files[i], t, inputs[i]) != 0) status = 1;
    } else {
      make_up(t, inputs[i], (uint64_t)i);
    }
  }
  for (int g = 0; status == 0 && g < ngiven; ++g) {
    int known = 0;
    for (int32_t i = 0; i < nin; ++i) {
      size_t n = strlen(kiln_model_input(m, i)->name);
      known |= strncmp(given[g], kiln_model_input(m, i)->name, n) == 0 && given[g][n] == '=';
    }
    if (!known) {
      fprintf(stderr, "run_model: --input %s: the model has no such input\n", given[g]);
      status = 1;
    }
  }
  for (int32_t i = 0; status == 0 && i < nout; ++i) {
    view_t v;
    outputs[i] = kiln_alloc(batch_view(kiln_model_output(m, i), batch, &v)->bytes, 64);
  }

  if (status == 0 &&
      kiln_model_run_batch(m, batch, (const void* const*)inputs, outputs) != KILN_OK) {
    fprintf(stderr, "run_model: %s\n", kiln_model_error(m));
    status = 3;
  }
  if (status == 0) {
    printf("model %s: %d input(s), %d output(s), weights %zu bytes, tensors %zu bytes\n",
           kiln_model_name(m), nin, nout, kiln_model_weights_bytes(m), kiln_model_arena_bytes(m));
    if (kiln_model_batch(m) != NULL)
      printf("batch %s: %" PRId64 " sample(s)\n", kiln_model_batch(m), batch);
  }
  for (int32_t i = 0; status == 0 && i < nout; ++i) {
    view_t v;
    const kiln_model_tensor* t = batch_view(kiln_model_output(m, i), batch, &v);
    size_t n = t->bytes / element_bytes(t);
    double sum = 0;
    for (size_t k = 0; k < n; ++k) sum += element(t, outputs[i], k);
    printf("output %s %s [", t->name, t->dtype);
    for (int32_t d = 0; d < t->rank; ++d) printf("%s%" PRId64, d ? ", " : "", t->shape[d]);
    printf("]: sum %.6g, first", sum);
    for (size_t k = 0; k < n && k < 4; ++k) printf(" %.6g", element(t, outputs[i], k));
    printf("\n");
    if (save != NULL) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s.npy", save, t->name);
      for (char* c = path + strlen(save) + 1; *c; ++c)
        if (*c == '/') *c = '_';
      if (write_npy(path, t, outputs[i]) != 0) status = 1;
    }
  }
  if (status == 0 && runs > 0) {
    uint64_t start = kiln_now_ns();
    for (long r = 0; r < runs && status == 0; ++r)
      if (kiln_model_run_batch(m, batch, (const void* const*)inputs, outputs) != KILN_OK)
        status = 3;
    double ms = (double)(kiln_now_ns() - start) / 1e6 / (double)runs;
    if (status == 0)
      printf("%.3f ms per run (mean of %ld, %d thread(s))\n", ms, runs, kiln_runtime_threads());
  }
  for (int32_t i = 0; i < nin; ++i) kiln_free(inputs[i]);
  for (int32_t i = 0; i < nout; ++i) kiln_free(outputs[i]);
  kiln_model_close(m);
  return status;
}

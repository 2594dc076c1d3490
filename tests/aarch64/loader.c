/* A tiny kernel loader for the aarch64 end-to-end test: dlopen a kiln shared object, call its
   entry point with the packed kiln_value ABI on buffers read from files, write the outputs back.

   usage: loader SO ENTRY JOB
          loader --probe-threads     exits 0 once a second thread has run (some qemu-user and
                                     kernel pairs hang in clone: the test asks before using two)

   JOB is a text file with one line per entry-point argument, in the ABI's order:
     param NAME VALUE               a run-time param (i64)
     buffer NAME BYTES IN OUT       a buffer of BYTES bytes, filled from the file IN; after the
                                    call it is written to the file OUT ("-": not written)
   Blank lines and lines starting with '#' are skipped.

   The runtime (kiln_parallel_launch, kiln_alloc, kiln_free) is linked into this program and
   exported with -rdynamic: that is where the shared object's undefined symbols resolve.
   Exit status: 0 ok, 1 bad usage or input, 2 the shared object cannot be loaded, 3 the kernel
   returned an error. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"

enum { MAX_ARGS = 64, NAME_LEN = 256, PATH_LEN = 1024, LINE_LEN = 4096 };

typedef struct {
  char name[NAME_LEN];
  int is_buffer;
  int64_t value;      /* param */
  size_t bytes;       /* buffer */
  char out[PATH_LEN]; /* buffer: where to write it, "-" for nowhere */
  void* data;
} arg_t;

static int read_into(const char* path, void* data, size_t bytes) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "loader: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t got = bytes ? fread(data, 1, bytes, f) : 0;
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != bytes || extra) {
    fprintf(stderr, "loader: %s does not hold exactly %zu bytes\n", path, bytes);
    return -1;
  }
  return 0;
}

static int write_from(const char* path, const void* data, size_t bytes) {
  FILE* f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "loader: cannot create %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t put = bytes ? fwrite(data, 1, bytes, f) : 0;
  if (fclose(f) != 0 || put != bytes) {
    fprintf(stderr, "loader: cannot write %s\n", path);
    return -1;
  }
  return 0;
}

/* Parses JOB into args; allocates and fills the buffers. Returns the count, or -1. */
static int read_job(const char* path, arg_t* args) {
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "loader: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  char line[LINE_LEN];
  int n = 0, lineno = 0, ok = 1;
  while (ok && fgets(line, sizeof line, f)) {
    ++lineno;
    if (line[0] == '#' || line[0] == '\n') continue;
    if (n == MAX_ARGS) {
      fprintf(stderr, "loader: %s:%d: more than %d arguments\n", path, lineno, MAX_ARGS);
      ok = 0;
      break;
    }
    arg_t* a = &args[n];
    memset(a, 0, sizeof *a);
    char in[PATH_LEN];
    unsigned long long bytes = 0;
    if (sscanf(line, "param %255s %" SCNd64, a->name, &a->value) == 2) {
      a->is_buffer = 0;
    } else if (sscanf(line, "buffer %255s %llu %1023s %1023s", a->name, &bytes, in, a->out) == 4) {
      a->is_buffer = 1;
      a->bytes = (size_t)bytes;
      a->data = kiln_alloc(a->bytes ? a->bytes : 1, 64);
      if (!a->data) {
        fprintf(stderr, "loader: cannot allocate %zu bytes for %s\n", a->bytes, a->name);
        ok = 0;
        break;
      }
      if (read_into(in, a->data, a->bytes) != 0) ok = 0;
    } else {
      fprintf(stderr, "loader: %s:%d: expected 'param NAME VALUE' or 'buffer NAME BYTES IN OUT'\n",
              path, lineno);
      ok = 0;
      break;
    }
    ++n;
  }
  fclose(f);
  if (!ok) {
    for (int k = 0; k < n; ++k) kiln_free(args[k].data);
    return -1;
  }
  return n;
}

static int probe_token;

static void* probe_thread(void* arg) { return arg; }

static int probe_threads(void) {
  pthread_t thread;
  void* result = NULL;
  if (pthread_create(&thread, NULL, probe_thread, &probe_token) != 0 ||
      pthread_join(thread, &result) != 0 || result != &probe_token) {
    fprintf(stderr, "loader: cannot run a second thread\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--probe-threads") == 0) return probe_threads();
  if (argc != 4) {
    fprintf(stderr, "usage: loader SO ENTRY JOB | loader --probe-threads\n");
    return 1;
  }
  static arg_t args[MAX_ARGS];
  int n = read_job(argv[3], args);
  if (n < 0) return 1;

  void* so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!so) {
    fprintf(stderr, "loader: cannot load %s: %s\n", argv[1], dlerror());
    return 2;
  }
  kiln_entry_fn entry;
  /* ISO C has no cast from object to function pointer; POSIX guarantees dlsym's result fits. */
  void* sym = dlsym(so, argv[2]);
  if (!sym) {
    fprintf(stderr, "loader: %s has no symbol %s\n", argv[1], argv[2]);
    return 2;
  }
  memcpy(&entry, &sym, sizeof entry);

  kiln_value packed[MAX_ARGS];
  for (int k = 0; k < n; ++k) {
    if (args[k].is_buffer) {
      packed[k].ptr = args[k].data;
    } else {
      packed[k].i64 = args[k].value;
    }
  }
  int32_t rc = entry(packed, n);
  if (rc != KILN_OK) {
    fprintf(stderr, "loader: %s returned error %d\n", argv[2], (int)rc);
    return 3;
  }

  int status = 0;
  for (int k = 0; k < n; ++k) {
    if (args[k].is_buffer && strcmp(args[k].out, "-") != 0 &&
        write_from(args[k].out, args[k].data, args[k].bytes) != 0)
      status = 1;
    kiln_free(args[k].data);
  }
  dlclose(so);
  return status;
}

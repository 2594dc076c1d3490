/* The agent's ELF loader (agent/src/elf_loader.h) on real kernels: each kiln shared object is
   loaded with kiln_elf_load and with dlopen, and both entry points run on the same random inputs
   must leave bit-identical buffers. Then the same object with only DT_HASH, with only
   DT_GNU_HASH and from an unaligned buffer; and the fixture objects (elf_loader_fixture.c), whose
   relocations, initializers, finalizers and RELRO are checked one by one.

   usage: elf_loader_test [OPTIONS] KERNEL.so[:PARAM=VALUE,...]...
     KERNEL.so.json, written by `kiln compile`, gives the entry point and the arguments; each
     run-time param needs a value after the colon.
     --fixture SO       also check the fixture shared object SO (repeatable)
     --rounds N         random inputs per kernel (default 3)
     --seed N           the inputs' seed (default 1); the same seed gives the same inputs on
                        every machine
     --save DIR         write each round's outputs to DIR/NAME.rROUND.out
     --expect DIR       compare each round's outputs with DIR/NAME.rROUND.out, written by --save
                        (on another machine, say): bit for bit, or with --tolerance
     --tolerance REL    floats may differ by REL relative to their size (integers never)

   Built with -DKILN_TEST_NO_DLOPEN (a static build, where dlopen cannot resolve the kernels'
   imports), it runs the loader alone and checks it against --expect. Exit status 0 when every
   check passes; each failure is printed. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifndef KILN_TEST_NO_DLOPEN
#include <dlfcn.h>
#endif

#include "elf_loader.h"
#include "kiln/runtime.h"

enum { MAX_ARGS = 32, MAX_PARAMS = 16, NAME_LEN = 128 };

static int failures;

static void failf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  ++failures;
}

/* ---- Files ---- */

static uint8_t* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t* data = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? 2 * cap : 65536;
      uint8_t* grown = realloc(data, cap + 1);
      if (!grown) break;
      data = grown;
    }
    size_t got = fread(data + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  fclose(f);
  if (data) data[len] = '\0'; /* a JSON file is a string too */
  *size = len;
  return data;
}

/* ---- A small JSON reader: enough for the artifact metadata ---- */

typedef struct json {
  char type; /* 's' string, 'n' number, 'a' array, 'o' object, 'l' literal */
  char* str; /* a string's value */
  double num;
  int n;              /* items of an array or object */
  struct json* items; /* n of them */
  char** keys;        /* an object's, n of them */
} json;

static void json_free(json* j) {
  for (int i = 0; i < j->n; ++i) {
    json_free(&j->items[i]);
    if (j->keys) free(j->keys[i]);
  }
  free(j->items);
  free(j->keys);
  free(j->str);
}

static const char* skip_ws(const char* p) {
  while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') ++p;
  return p;
}

static const char* json_string(const char* p, char** out) {
  size_t cap = 16, len = 0;
  char* s = malloc(cap);
  for (++p; s && *p && *p != '"'; ++p) {
    char c = *p;
    if (c == '\\') {
      ++p;
      c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == 'u' ? '?' : *p;
      if (*p == 'u') p += strlen(p) >= 5 ? 4 : 0;
      if (!c) break;
    }
    if (len + 2 > cap) s = realloc(s, cap *= 2);
    if (s) s[len++] = c;
  }
  if (!s || *p != '"') {
    free(s);
    return NULL;
  }
  s[len] = '\0';
  *out = s;
  return p + 1;
}

static const char* json_value(const char* p, json* out, int depth) {
  memset(out, 0, sizeof *out);
  p = skip_ws(p);
  if (depth > 32) return NULL;
  if (*p == '"') {
    out->type = 's';
    return json_string(p, &out->str);
  }
  if (*p == '[' || *p == '{') {
    char close = *p == '[' ? ']' : '}';
    out->type = *p == '[' ? 'a' : 'o';
    p = skip_ws(p + 1);
    int cap = 0;
    while (*p != close) {
      if (out->n == cap) {
        cap = cap ? 2 * cap : 8;
        out->items = realloc(out->items, (size_t)cap * sizeof *out->items);
        out->keys = out->type == 'o' ? realloc(out->keys, (size_t)cap * sizeof *out->keys) : NULL;
        if (!out->items || (out->type == 'o' && !out->keys)) return NULL;
      }
      if (out->type == 'o') {
        if (*p != '"' || !(p = json_string(p, &out->keys[out->n]))) return NULL;
        p = skip_ws(p);
        if (*p++ != ':') return NULL;
      }
      if (!(p = json_value(p, &out->items[out->n], depth + 1))) return NULL;
      ++out->n;
      p = skip_ws(p);
      if (*p == ',')
        p = skip_ws(p + 1);
      else if (*p != close)
        return NULL;
    }
    return p + 1;
  }
  char* end;
  out->num = strtod(p, &end);
  if (end != p) {
    out->type = 'n';
    return end;
  }
  out->type = 'l';
  while (*p >= 'a' && *p <= 'z') ++p;
  return p;
}

static const json* json_get(const json* j, const char* key) {
  for (int i = 0; j->type == 'o' && i < j->n; ++i) {
    if (strcmp(j->keys[i], key) == 0) return &j->items[i];
  }
  return NULL;
}

static const char* json_str(const json* j, const char* key) {
  const json* v = json_get(j, key);
  return v && v->type == 's' ? v->str : NULL;
}

/* ---- Shape expressions: integers, params, + - * / % and parentheses ---- */

typedef struct {
  char name[NAME_LEN];
  int64_t value;
} param;

typedef struct {
  const char* p;
  const param* params;
  int nparams;
  int ok;
} expr;

static int64_t expr_sum(expr* e);

static int64_t expr_atom(expr* e) {
  while (*e->p == ' ') ++e->p;
  if (*e->p == '-') {
    ++e->p;
    return -expr_atom(e);
  }
  if (*e->p == '(') {
    ++e->p;
    int64_t v = expr_sum(e);
    while (*e->p == ' ') ++e->p;
    if (*e->p++ != ')') e->ok = 0;
    return v;
  }
  if (*e->p >= '0' && *e->p <= '9') return strtoll(e->p, (char**)&e->p, 10);
  const char* start = e->p;
  while (*e->p == '_' || (*e->p >= 'a' && *e->p <= 'z') || (*e->p >= 'A' && *e->p <= 'Z') ||
         (*e->p >= '0' && *e->p <= '9'))
    ++e->p;
  for (int i = 0; i < e->nparams; ++i) {
    if (strlen(e->params[i].name) == (size_t)(e->p - start) &&
        strncmp(e->params[i].name, start, (size_t)(e->p - start)) == 0)
      return e->params[i].value;
  }
  e->ok = 0;
  return 0;
}

static int64_t expr_product(expr* e) {
  int64_t v = expr_atom(e);
  for (;;) {
    while (*e->p == ' ') ++e->p;
    char op = *e->p;
    if (op != '*' && op != '/' && op != '%') return v;
    ++e->p;
    int64_t r = expr_atom(e);
    if (op == '*') {
      v *= r;
    } else if (r == 0) {
      e->ok = 0;
    } else { /* kiln's integer division rounds toward negative infinity */
      int64_t q = v / r, m = v % r;
      if (m != 0 && ((m < 0) != (r < 0))) --q, m += r;
      v = op == '/' ? q : m;
    }
  }
}

static int64_t expr_sum(expr* e) {
  int64_t v = expr_product(e);
  for (;;) {
    while (*e->p == ' ') ++e->p;
    if (*e->p != '+' && *e->p != '-') return v;
    char op = *e->p++;
    int64_t r = expr_product(e);
    v = op == '+' ? v + r : v - r;
  }
}

/* ---- Random inputs: the same on every machine for the same seed ---- */

static uint64_t rng;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static uint64_t fnv1a(const char* s) {
  uint64_t h = 0xcbf29ce484222325u;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 0x100000001b3u;
  return h;
}

/* ---- Kernels ---- */

enum dtype { F32, F64, I32, I64, BOOL };

typedef struct {
  char name[NAME_LEN];
  int is_buffer, output;
  enum dtype dtype;
  int64_t value; /* a param's */
  size_t count;  /* a buffer's elements */
  int has_spec, sorted;
  int64_t lo, hi; /* an integer input's values, both included */
} arg_desc;

typedef struct {
  char path[1024], name[NAME_LEN], entry[NAME_LEN];
  arg_desc args[MAX_ARGS];
  int nargs;
} kernel;

/* Value specs of integer inputs (`in [lo, hi] sorted` in the .kiln files), which the metadata
   gives only in words: CSR row pointers and column indices. */
static const struct {
  const char *kernel, *buffer;
  int64_t lo, hi;
  int sorted;
} value_specs[] = {
    {"segment_sum", "offsets", 0, 200, 1},
    {"spmm", "ptr", 0, 96, 1},
    {"spmm", "idx", 0, 19, 0},
};

static size_t dtype_size(enum dtype t) { return t == F64 || t == I64 ? 8 : t == BOOL ? 1 : 4; }

/* Reads SPEC (PATH[:NAME=VALUE,...]) and PATH.json into k. 0, or -1 after printing why. */
static int describe_kernel(const char* spec, kernel* k) {
  memset(k, 0, sizeof *k);
  param params[MAX_PARAMS];
  int nparams = 0;
  snprintf(k->path, sizeof k->path, "%s", spec);
  char* colon = strchr(k->path, ':');
  if (colon) {
    *colon = '\0';
    for (char* item = strtok(colon + 1, ","); item; item = strtok(NULL, ",")) {
      char* eq = strchr(item, '=');
      if (!eq || nparams == MAX_PARAMS) {
        failf("%s: expected NAME=VALUE, found '%s'", spec, item);
        return -1;
      }
      *eq = '\0';
      snprintf(params[nparams].name, NAME_LEN, "%s", item);
      params[nparams++].value = strtoll(eq + 1, NULL, 10);
    }
  }
  char json_path[1100];
  snprintf(json_path, sizeof json_path, "%s.json", k->path);
  size_t size;
  char* text = (char*)read_file(json_path, &size);
  json root;
  if (!text || !json_value(text, &root, 0) || root.type != 'o') {
    failf("%s: cannot read its metadata", json_path);
    free(text);
    return -1;
  }
  free(text);
  const json* args = json_get(&root, "args");
  const char *name = json_str(&root, "name"), *entry = json_str(&root, "entry");
  int ok = name && entry && args && args->type == 'a' && args->n <= MAX_ARGS;
  if (ok) {
    snprintf(k->name, NAME_LEN, "%s", name);
    snprintf(k->entry, NAME_LEN, "%s", entry);
  }
  for (int i = 0; ok && i < args->n; ++i) {
    const json* a = &args->items[i];
    arg_desc* d = &k->args[k->nargs++];
    const char *kind = json_str(a, "kind"), *aname = json_str(a, "name");
    const char* dtype = json_str(a, "dtype");
    if (!kind || !aname || !dtype) {
      ok = 0;
      break;
    }
    snprintf(d->name, NAME_LEN, "%s", aname);
    d->dtype = strcmp(dtype, "f32") == 0   ? F32
               : strcmp(dtype, "f64") == 0 ? F64
               : strcmp(dtype, "i32") == 0 ? I32
               : strcmp(dtype, "i64") == 0 ? I64
                                           : BOOL;
    if (strcmp(kind, "param") == 0) {
      int found = 0;
      for (int p = 0; p < nparams; ++p) {
        if (strcmp(params[p].name, aname) == 0) d->value = params[p].value, found = 1;
      }
      if (!found) {
        failf("%s: the run-time param %s needs a value (%s:%s=N)", k->path, aname, k->path, aname);
        ok = 0;
      }
      continue;
    }
    d->is_buffer = 1;
    const char* role = json_str(a, "role");
    d->output = role && strcmp(role, "output") == 0;
    const json* shape = json_get(a, "shape");
    d->count = 1;
    for (int s = 0; shape && s < shape->n; ++s) {
      expr e = {shape->items[s].str ? shape->items[s].str : "", params, nparams, 1};
      int64_t extent = expr_sum(&e);
      if (!e.ok || *e.p != '\0' || extent < 0) {
        failf("%s: cannot evaluate the extent '%s' of %s", k->path, shape->items[s].str, aname);
        ok = 0;
        break;
      }
      d->count *= (size_t)extent;
    }
    for (size_t v = 0; v < sizeof value_specs / sizeof value_specs[0]; ++v) {
      if (strcmp(value_specs[v].kernel, k->name) == 0 &&
          strcmp(value_specs[v].buffer, aname) == 0) {
        d->has_spec = 1;
        d->lo = value_specs[v].lo;
        d->hi = value_specs[v].hi;
        d->sorted = value_specs[v].sorted;
      }
    }
  }
  json_free(&root);
  if (!ok && failures == 0) failf("%s: unexpected metadata in %s", k->path, json_path);
  return ok ? 0 : -1;
}

static int compare_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

/* Fills the input buffers of one round with random values (outputs with a fixed pattern). */
static void fill_inputs(const kernel* k, void** bufs) {
  for (int i = 0; i < k->nargs; ++i) {
    const arg_desc* d = &k->args[i];
    if (!d->is_buffer) continue;
    size_t bytes = d->count * dtype_size(d->dtype);
    if (d->output) {
      memset(bufs[i], 0xa5, bytes);
      continue;
    }
    int64_t* ints = NULL;
    if (d->dtype == I32 || d->dtype == I64) {
      ints = malloc((d->count ? d->count : 1) * sizeof *ints);
      int64_t lo = d->has_spec ? d->lo : -1000, hi = d->has_spec ? d->hi : 1000;
      for (size_t e = 0; e < d->count; ++e) {
        ints[e] = lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
      }
      if (d->sorted) qsort(ints, d->count, sizeof *ints, compare_i64);
    }
    for (size_t e = 0; e < d->count; ++e) {
      /* Multiples of 1/500 in [-2, 2]: exact in any float format, whatever the machine. */
      int64_t r = (int64_t)(next_u64() % 2001) - 1000;
      switch (d->dtype) {
        case F32:
          ((float*)bufs[i])[e] = (float)r / 500.0f;
          break;
        case F64:
          ((double*)bufs[i])[e] = (double)r / 500.0;
          break;
        case I32:
          ((int32_t*)bufs[i])[e] = (int32_t)ints[e];
          break;
        case I64:
          ((int64_t*)bufs[i])[e] = ints[e];
          break;
        case BOOL:
          ((uint8_t*)bufs[i])[e] = (uint8_t)(r & 1);
          break;
      }
    }
    free(ints);
  }
}

/* One set of argument buffers for k. */
static void** alloc_buffers(const kernel* k) {
  void** bufs = calloc(MAX_ARGS, sizeof *bufs);
  for (int i = 0; bufs && i < k->nargs; ++i) {
    if (k->args[i].is_buffer)
      bufs[i] = kiln_alloc(k->args[i].count * dtype_size(k->args[i].dtype), 64);
  }
  return bufs;
}

static void free_buffers(const kernel* k, void** bufs) {
  for (int i = 0; bufs && i < k->nargs; ++i) kiln_free(bufs[i]);
  free(bufs);
}

static void copy_buffers(const kernel* k, void** to, void** from) {
  for (int i = 0; i < k->nargs; ++i) {
    if (k->args[i].is_buffer)
      memcpy(to[i], from[i], k->args[i].count * dtype_size(k->args[i].dtype));
  }
}

static int32_t call_entry(const kernel* k, void* entry, void** bufs) {
  kiln_value packed[MAX_ARGS];
  for (int i = 0; i < k->nargs; ++i) {
    if (k->args[i].is_buffer) {
      packed[i].ptr = bufs[i];
    } else {
      packed[i].i64 = k->args[i].value;
    }
  }
  kiln_entry_fn fn;
  memcpy(&fn, &entry, sizeof fn);
  return fn(packed, k->nargs);
}

/* Whether any output byte changed from fill_inputs' pattern: a run that wrote nothing would
   compare equal to another that wrote nothing. */
static int wrote_outputs(const kernel* k, void** bufs) {
  for (int i = 0; i < k->nargs; ++i) {
    if (!k->args[i].is_buffer || !k->args[i].output) continue;
    const uint8_t* b = bufs[i];
    for (size_t e = 0; e < k->args[i].count * dtype_size(k->args[i].dtype); ++e) {
      if (b[e] != 0xa5) return 1;
    }
  }
  return 0;
}

/* The name of the first buffer that differs between a and b, or NULL. */
static const char* first_difference(const kernel* k, void** a, void** b) {
  for (int i = 0; i < k->nargs; ++i) {
    if (k->args[i].is_buffer &&
        memcmp(a[i], b[i], k->args[i].count * dtype_size(k->args[i].dtype)) != 0)
      return k->args[i].name;
  }
  return NULL;
}

#ifndef KILN_TEST_NO_DLOPEN
/* dlopen of a path: a name without a slash would be searched for in the library path. */
static void* dlopen_path(const char* path) {
  char with_dir[1100];
  snprintf(with_dir, sizeof with_dir, "%s%s", strchr(path, '/') ? "" : "./", path);
  return dlopen(with_dir, RTLD_NOW | RTLD_LOCAL);
}
#endif

/* ---- Imports: the runtime, libm, and the fixture's data import ---- */

int kiln_fixture_imported = 1234;

static kiln_symbol imports[64];

static void add_import(const char* name, void (*fn)(void)) {
  int n = 0;
  while (imports[n].name) ++n;
  void* p;
  memcpy(&p, &fn, sizeof p);
  imports[n] = (kiln_symbol){name, p};
}

static void make_imports(void) {
  for (const kiln_runtime_symbol* s = kiln_runtime_symbols(); s->name; ++s)
    add_import(s->name, s->address);
    /* The libm functions kiln's compiler lets a kernel import (shared_object.cpp). */
#define LIBM(f) add_import(#f, (void (*)(void))f)
  LIBM(expf), LIBM(exp), LIBM(logf), LIBM(log), LIBM(sinf), LIBM(sin), LIBM(cosf), LIBM(cos);
  LIBM(powf), LIBM(pow), LIBM(sqrtf), LIBM(sqrt), LIBM(floorf), LIBM(floor), LIBM(ceilf);
  LIBM(ceil), LIBM(fabsf), LIBM(fabs);
#undef LIBM
  int n = 0;
  while (imports[n].name) ++n;
  imports[n] = (kiln_symbol){"kiln_fixture_imported", &kiln_fixture_imported};
}

/* ---- Memory protection: a write to addr must fault (checked in a child) ---- */

static void expect_write_faults(const void* addr, const char* what) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    /* Die of the signal, quietly, even under a sanitizer that reports faults. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &dfl, NULL);
    sigaction(SIGBUS, &dfl, NULL);
    *(volatile char*)addr = 0;
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    failf("%s: cannot fork to check that a write faults", what);
  } else if (!WIFSIGNALED(status) || (WTERMSIG(status) != SIGSEGV && WTERMSIG(status) != SIGBUS)) {
    failf("%s: a write did not fault (child status 0x%x)", what, (unsigned)status);
  }
}

/* A copy of so in which the dynamic tag `from` is renamed DT_DEBUG (which nothing reads): the
   object without its DT_HASH or its DT_GNU_HASH. NULL when so has no such tag. */
static uint8_t* without_tag(const uint8_t* so, size_t size, uint64_t from) {
  uint8_t* copy = malloc(size);
  memcpy(copy, so, size);
  uint64_t phoff;
  uint16_t phnum;
  memcpy(&phoff, so + 32, 8);
  memcpy(&phnum, so + 56, 2);
  for (uint16_t i = 0; i < phnum; ++i) {
    const uint8_t* ph = so + phoff + 56u * i;
    uint32_t type;
    uint64_t off, filesz;
    memcpy(&type, ph, 4);
    memcpy(&off, ph + 8, 8);
    memcpy(&filesz, ph + 32, 8);
    if (type != 2 /* PT_DYNAMIC */) continue;
    for (uint64_t d = off; d + 16 <= off + filesz; d += 16) {
      uint64_t tag;
      memcpy(&tag, so + d, 8);
      if (tag == from) {
        uint64_t debug = 21; /* DT_DEBUG */
        memcpy(copy + d, &debug, 8);
        return copy;
      }
    }
  }
  free(copy);
  return NULL;
}

/* Loads `so` with the loader and runs k once on `inputs`, comparing with `want`. */
static void run_variant(const kernel* k, const uint8_t* so, size_t size, const char* variant,
                        void** inputs, void** want) {
  char err[512];
  kiln_elf* elf = kiln_elf_load(so, size, imports, err, sizeof err);
  if (!elf) {
    failf("%s %s: kiln_elf_load: %s", k->name, variant, err);
    return;
  }
  void* entry = kiln_elf_symbol(elf, k->entry);
  void** bufs = alloc_buffers(k);
  if (!entry) {
    failf("%s %s: no symbol %s", k->name, variant, k->entry);
  } else {
    copy_buffers(k, bufs, inputs);
    int32_t rc = call_entry(k, entry, bufs);
    const char* diff = first_difference(k, bufs, want);
    if (rc != KILN_OK || diff)
      failf("%s %s: status %d, buffer %s differs", k->name, variant, (int)rc, diff ? diff : "-");
  }
  for (const kiln_symbol* s = imports; s->name; ++s) {
    if (kiln_elf_symbol(elf, s->name))
      failf("%s %s: the import %s is found as a definition", k->name, variant, s->name);
  }
  if (kiln_elf_symbol(elf, "kiln_no_such_symbol") || kiln_elf_symbol(elf, ""))
    failf("%s %s: a symbol it does not define is found", k->name, variant);
  free_buffers(k, bufs);
  kiln_elf_unload(elf);
}

typedef struct {
  const char* save_dir;
  const char* expect_dir;
  double tolerance;
  int rounds;
  uint64_t seed;
} options;

/* Compares one round's outputs with the file `path` written by --save. */
static void expect_outputs(const kernel* k, void** bufs, const char* path, double tolerance) {
  size_t size, offset = 0;
  uint8_t* want = read_file(path, &size);
  if (!want) {
    failf("%s: cannot read %s", k->name, path);
    return;
  }
  size_t exact = 0, close = 0, total = 0;
  for (int i = 0; i < k->nargs; ++i) {
    const arg_desc* d = &k->args[i];
    if (!d->is_buffer || !d->output) continue;
    size_t bytes = d->count * dtype_size(d->dtype);
    if (offset + bytes > size) {
      failf("%s: %s is shorter than the outputs", k->name, path);
      break;
    }
    for (size_t e = 0; e < d->count; ++e, ++total) {
      size_t at = e * dtype_size(d->dtype);
      if (memcmp((uint8_t*)bufs[i] + at, want + offset + at, dtype_size(d->dtype)) == 0) {
        ++exact;
        continue;
      }
      double got = 0, expected = 0;
      if (d->dtype == F32) {
        float g, w;
        memcpy(&g, (uint8_t*)bufs[i] + at, 4);
        memcpy(&w, want + offset + at, 4);
        got = g, expected = w;
      } else if (d->dtype == F64) {
        memcpy(&got, (uint8_t*)bufs[i] + at, 8);
        memcpy(&expected, want + offset + at, 8);
      }
      double scale = fmax(1.0, fmax(fabs(got), fabs(expected)));
      if ((d->dtype == F32 || d->dtype == F64) && fabs(got - expected) <= tolerance * scale) {
        ++close;
      } else {
        failf("%s: %s[%zu] is %.9g, expected %.9g (%s)", k->name, d->name, e, got, expected, path);
        break;
      }
    }
    offset += bytes;
  }
  printf("      %s: %zu of %zu output values bit-identical to %s, %zu within the tolerance\n",
         k->name, exact, total, path, close);
  free(want);
}

static void save_outputs(const kernel* k, void** bufs, const char* path) {
  FILE* f = fopen(path, "wb");
  for (int i = 0; f && i < k->nargs; ++i) {
    if (k->args[i].is_buffer && k->args[i].output)
      fwrite(bufs[i], dtype_size(k->args[i].dtype), k->args[i].count, f);
  }
  if (!f || fclose(f) != 0) failf("%s: cannot write %s", k->name, path);
}

static void test_kernel(const char* spec, const options* opt) {
  kernel k;
  if (describe_kernel(spec, &k) != 0) return;
  size_t size;
  uint8_t* so = read_file(k.path, &size);
  if (!so) {
    failf("%s: cannot read it", k.path);
    return;
  }
  int before = failures;
  char err[512];
  kiln_elf* elf = kiln_elf_load(so, size, imports, err, sizeof err);
  if (!elf) {
    failf("%s: kiln_elf_load: %s", k.path, err);
    free(so);
    return;
  }
  void* entry = kiln_elf_symbol(elf, k.entry);
#ifndef KILN_TEST_NO_DLOPEN
  void* dl = dlopen_path(k.path);
  void* dl_entry = dl ? dlsym(dl, k.entry) : NULL;
  if (!dl_entry) failf("%s: dlopen: %s", k.path, dlerror());
#endif
  if (!entry) failf("%s: kiln_elf_symbol finds no %s", k.path, k.entry);

  void** inputs = alloc_buffers(&k);
  void** bufs = alloc_buffers(&k);
  void** first = alloc_buffers(&k); /* round 0's results, for the variants */
  size_t out_bytes = 0;
  for (int i = 0; i < k.nargs; ++i) {
    if (k.args[i].is_buffer && k.args[i].output)
      out_bytes += k.args[i].count * dtype_size(k.args[i].dtype);
  }
  for (int round = 0; entry && round < opt->rounds; ++round) {
    rng = opt->seed * 1000003u + fnv1a(k.name) + (uint64_t)round;
    fill_inputs(&k, inputs);
    copy_buffers(&k, bufs, inputs);
    int32_t rc = call_entry(&k, entry, bufs);
    if (rc != KILN_OK)
      failf("%s round %d: the loaded kernel returned status %d", k.name, round, rc);
    if (!wrote_outputs(&k, bufs)) failf("%s round %d: the kernel wrote no output", k.name, round);
#ifndef KILN_TEST_NO_DLOPEN
    if (dl_entry) {
      void** dl_bufs = alloc_buffers(&k);
      copy_buffers(&k, dl_bufs, inputs);
      int32_t dl_rc = call_entry(&k, dl_entry, dl_bufs);
      const char* diff = first_difference(&k, bufs, dl_bufs);
      if (dl_rc != rc || diff)
        failf("%s round %d: dlopen's kernel returned %d (the loader's %d); buffer %s differs",
              k.name, round, dl_rc, rc, diff ? diff : "-");
      free_buffers(&k, dl_bufs);
    }
#endif
    char path[1200];
    if (opt->save_dir) {
      snprintf(path, sizeof path, "%s/%s.r%d.out", opt->save_dir, k.name, round);
      save_outputs(&k, bufs, path);
    }
    if (opt->expect_dir) {
      snprintf(path, sizeof path, "%s/%s.r%d.out", opt->expect_dir, k.name, round);
      expect_outputs(&k, bufs, path, opt->tolerance);
    }
    if (round == 0) copy_buffers(&k, first, bufs);
  }
  if (entry) {
    /* Round 0 again, through the other hash table, and from a buffer at an odd address. */
    rng = opt->seed * 1000003u + fnv1a(k.name);
    fill_inputs(&k, inputs);
    uint8_t* variant = without_tag(so, size, DT_GNU_HASH);
    if (variant) run_variant(&k, variant, size, "(DT_HASH only)", inputs, first);
    free(variant);
    variant = without_tag(so, size, DT_HASH);
    if (variant) run_variant(&k, variant, size, "(DT_GNU_HASH only)", inputs, first);
    free(variant);
    uint8_t* odd = malloc(size + 1);
    memcpy(odd + 1, so, size);
    run_variant(&k, odd + 1, size, "(from an unaligned buffer)", inputs, first);
    free(odd);
    expect_write_faults(entry, "a kernel's code");
  }
  if (failures == before) {
    char compared[160] = "";
#ifndef KILN_TEST_NO_DLOPEN
    snprintf(compared, sizeof compared, ", identical to dlopen's");
#endif
    if (opt->expect_dir)
      snprintf(compared + strlen(compared), sizeof compared - strlen(compared),
               "%s matching the expected outputs%s", compared[0] ? " and" : ",",
               opt->tolerance > 0 ? " within the tolerance" : " bit for bit");
    printf("ok  %s (%s): %d rounds, %zu output bytes each%s\n", k.name, k.path, opt->rounds,
           out_bytes, compared[0] ? compared : ", compared with nothing (no dlopen, no --expect)");
  }
  free_buffers(&k, inputs);
  free_buffers(&k, bufs);
  free_buffers(&k, first);
  kiln_elf_unload(elf);
#ifndef KILN_TEST_NO_DLOPEN
  if (dl) dlclose(dl);
#endif
  free(so);
}

/* ---- The fixture ---- */

typedef struct {
  void* (*sym)(void* handle, const char* name);
  void* handle;
  const char* how;
} finder;

static void* fixture_symbol(const finder* f, const char* name) {
  void* p = f->sym(f->handle, name);
  if (!p) failf("fixture (%s): no symbol %s", f->how, name);
  return p;
}

/* The fixture's functions' types. */
typedef const char* (*str_fn)(void);
typedef int (*int_fn)(void);
typedef int* (*int_ptr_fn)(void);
typedef void* (*alloc_fn)(size_t);
typedef void (*free_fn)(void*);
typedef void* (*ptr_fn)(void);
typedef const void* (*const_ptr_fn)(void);
typedef double (*math_fn)(double);
typedef void (*set_log_fn)(char*);

/* Declares `var` of function pointer type `type`, the fixture's function `name`. */
#define FIXTURE_FN(f, type, name, var)     \
  type var;                                \
  void* var##_p = fixture_symbol(f, name); \
  memcpy(&var, &var##_p, sizeof var)

/* The fixture's behaviour, whoever loaded it. Returns 0 when every function could be found. */
static int check_fixture_functions(const finder* f) {
  FIXTURE_FN(f, str_fn, "fixture_init_log", init_log);
  FIXTURE_FN(f, int_fn, "fixture_table_sum", table_sum);
  FIXTURE_FN(f, int_fn, "fixture_bump", bump);
  FIXTURE_FN(f, int_ptr_fn, "fixture_counter_address", counter_address);
  FIXTURE_FN(f, alloc_fn, "fixture_alloc", alloc);
  FIXTURE_FN(f, free_fn, "fixture_free", free_p);
  FIXTURE_FN(f, ptr_fn, "fixture_free_address", free_address);
  FIXTURE_FN(f, math_fn, "fixture_exp", exp_fn);
  FIXTURE_FN(f, int_fn, "fixture_imported", imported);
  FIXTURE_FN(f, const_ptr_fn, "fixture_relro_address", relro_address);
  void* counter = fixture_symbol(f, "fixture_counter");
  void* counter_pointer = fixture_symbol(f, "fixture_counter_pointer");
  void* alloc_pointer = fixture_symbol(f, "fixture_alloc_pointer");
  if (!init_log_p || !table_sum_p || !bump_p || !counter_address_p || !alloc_p || !free_p_p ||
      !free_address_p || !exp_fn_p || !imported_p || !relro_address_p || !counter ||
      !counter_pointer || !alloc_pointer)
    return -1;

  void* kiln_alloc_addr;
  void* kiln_free_addr;
  void* (*alloc_fn)(size_t, size_t) = kiln_alloc;
  void (*free_fn2)(void*) = kiln_free;
  memcpy(&kiln_alloc_addr, &alloc_fn, sizeof kiln_alloc_addr);
  memcpy(&kiln_free_addr, &free_fn2, sizeof kiln_free_addr);

  if (strcmp(init_log(), "Iab") != 0)
    failf("fixture (%s): initializers ran as '%s', not 'Iab' (DT_INIT, then DT_INIT_ARRAY)", f->how,
          init_log());
  if (table_sum() != 60)
    failf("fixture (%s): RELATIVE pointers give %d, not 60", f->how, table_sum());
  if (counter_address() != counter)
    failf("fixture (%s): GLOB_DAT to its own symbol gives %p, not %p", f->how,
          (void*)counter_address(), counter);
  if (*(int* const*)counter_pointer != counter)
    failf("fixture (%s): the absolute relocation to its own symbol gives %p, not %p", f->how,
          (void*)*(int* const*)counter_pointer, counter);
  int first = bump(), second = bump();
  if (first != 42 || second != 43 || *(int*)counter != 43)
    failf("fixture (%s): the counter went 41 -> %d -> %d", f->how, first, second);
  if (*(void* const*)alloc_pointer != kiln_alloc_addr)
    failf("fixture (%s): the absolute relocation to an import gives %p, not kiln_alloc at %p",
          f->how, *(void* const*)alloc_pointer, kiln_alloc_addr);
  if (free_address() != kiln_free_addr)
    failf("fixture (%s): GLOB_DAT to an import gives %p, not kiln_free at %p", f->how,
          free_address(), kiln_free_addr);
  void* p = alloc(1000);
  if (!p || (uintptr_t)p % 128 != 0) failf("fixture (%s): fixture_alloc gave %p", f->how, p);
  memset(p, 1, 1000);
  free_p(p);
  if (exp_fn(1.0) != exp(1.0)) failf("fixture (%s): exp(1) is %.17g", f->how, exp_fn(1.0));
  if (imported() != kiln_fixture_imported)
    failf("fixture (%s): the data import reads %d, not %d", f->how, imported(),
          kiln_fixture_imported);
  char what[128];
  snprintf(what, sizeof what, "fixture (%s): RELRO data", f->how);
  expect_write_faults(relro_address(), what);
  snprintf(what, sizeof what, "fixture (%s): code", f->how);
  expect_write_faults(table_sum_p, what);
  return 0;
}

static void* elf_finder(void* handle, const char* name) { return kiln_elf_symbol(handle, name); }

static void set_fini_log(const finder* f, char* log) {
  FIXTURE_FN(f, set_log_fn, "fixture_set_fini_log", set_log);
  if (set_log_p) set_log(log);
}

static void test_fixture(const char* path) {
  int before = failures;
  size_t size;
  uint8_t* so = read_file(path, &size);
  if (!so) {
    failf("%s: cannot read it", path);
    return;
  }
  char err[512], log[8] = {0};
  kiln_elf* elf = kiln_elf_load(so, size, imports, err, sizeof err);
  if (!elf) {
    failf("%s: kiln_elf_load: %s", path, err);
  } else {
    finder f = {elf_finder, elf, "kiln_elf_load"};
    check_fixture_functions(&f);
    set_fini_log(&f, log);
    kiln_elf_unload(elf);
    if (strcmp(log, "zF") != 0)
      failf(
          "fixture (kiln_elf_load): finalizers ran as '%s', not 'zF' (DT_FINI_ARRAY, then "
          "DT_FINI)",
          log);
  }
#ifndef KILN_TEST_NO_DLOPEN
  /* The same checks through the system's loader: they hold there too. */
  void* dl = dlopen_path(path);
  if (!dl) {
    failf("%s: dlopen: %s", path, dlerror());
  } else {
    finder f = {dlsym, dl, "dlopen"};
    check_fixture_functions(&f);
    memset(log, 0, sizeof log);
    set_fini_log(&f, log);
    dlclose(dl);
    if (strcmp(log, "zF") != 0) failf("fixture (dlopen): finalizers ran as '%s'", log);
  }
#endif
  free(so);
  if (failures == before)
    printf("ok  fixture %s: relocations, RELRO, initializers and finalizers\n", path);
}

int main(int argc, char** argv) {
  options opt = {NULL, NULL, 0.0, 3, 1};
  const char* fixtures[16];
  int nfixtures = 0, nkernels = 0;
  make_imports();
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    int has_value = i + 1 < argc;
    if (strcmp(a, "--fixture") == 0 && has_value && nfixtures < 16) {
      fixtures[nfixtures++] = argv[++i];
    } else if (strcmp(a, "--rounds") == 0 && has_value) {
      opt.rounds = atoi(argv[++i]);
    } else if (strcmp(a, "--seed") == 0 && has_value) {
      opt.seed = strtoull(argv[++i], NULL, 0);
    } else if (strcmp(a, "--save") == 0 && has_value) {
      opt.save_dir = argv[++i];
    } else if (strcmp(a, "--expect") == 0 && has_value) {
      opt.expect_dir = argv[++i];
    } else if (strcmp(a, "--tolerance") == 0 && has_value) {
      opt.tolerance = strtod(argv[++i], NULL);
    } else if (a[0] == '-') {
      fprintf(stderr,
              "usage: elf_loader_test [--fixture SO] [--rounds N] [--seed N] [--save DIR] "
              "[--expect DIR] [--tolerance REL] KERNEL.so[:PARAM=VALUE,...]...\n");
      return 2;
    }
  }
  for (int i = 0; i < nfixtures; ++i) test_fixture(fixtures[i]);
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') {
      ++i;
      continue;
    }
    test_kernel(argv[i], &opt);
    ++nkernels;
  }
  if (failures) {
    printf("elf_loader_test: %d failures\n", failures);
    return 1;
  }
  printf("elf_loader_test: ok (%d kernels, %d fixtures)\n", nkernels, nfixtures);
  return 0;
}

/* Detecting this machine (device.h). */
#define _GNU_SOURCE
#include "device.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/runtime.h"

static void copy(char* to, size_t cap, const char* from) { snprintf(to, cap, "%s", from); }

/* The value of the first "NAME<tabs>: value" line of /proc/cpuinfo, or "". */
static void cpuinfo_field(const char* name, char* out, size_t cap) {
  out[0] = '\0';
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[8192];
  size_t n = strlen(name);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, name, n) != 0) continue;
    const char* p = line + n;
    while (*p == ' ' || *p == '\t') ++p;
    if (*p != ':') continue;
    ++p;
    while (*p == ' ') ++p;
    copy(out, cap, p);
    size_t len = strlen(out);
    while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == ' ')) out[--len] = '\0';
    break;
  }
  fclose(f);
}

/* Whether the space-separated list holds `word`. */
static int has_word(const char* list, const char* word) {
  size_t n = strlen(word);
  for (const char* p = list; (p = strstr(p, word)) != NULL; p += n) {
    int starts = p == list || p[-1] == ' ';
    int ends = p[n] == '\0' || p[n] == ' ';
    if (starts && ends) return 1;
  }
  return 0;
}

#if defined(__x86_64__)
static void detect_cpu(device_info* d) {
  copy(d->triple, sizeof d->triple, "x86_64-linux-gnu");
  char flags[8192];
  cpuinfo_field("flags", flags, sizeof flags);
  cpuinfo_field("model name", d->cpu_model, sizeof d->cpu_model);
  /* /proc/cpuinfo's flags as LLVM's features, with the lowest x86-64 micro-architecture level
     (psABI; LLVM's x86-64-vN CPUs) that implies each; 5: none does. */
  static const struct {
    const char* flag;
    const char* feature;
    int level;
  } features[] = {
      {"cx16", "+cx16", 2},
      {"lahf_lm", "+sahf", 2},
      {"popcnt", "+popcnt", 2},
      {"sse4_1", "+sse4.1", 2},
      {"sse4_2", "+sse4.2", 2},
      {"ssse3", "+ssse3", 2},
      {"avx", "+avx", 3},
      {"avx2", "+avx2", 3},
      {"bmi1", "+bmi", 3},
      {"bmi2", "+bmi2", 3},
      {"f16c", "+f16c", 3},
      {"fma", "+fma", 3},
      {"abm", "+lzcnt", 3},
      {"movbe", "+movbe", 3},
      {"xsave", "+xsave", 3},
      {"avx512f", "+avx512f", 4},
      {"avx512bw", "+avx512bw", 4},
      {"avx512cd", "+avx512cd", 4},
      {"avx512dq", "+avx512dq", 4},
      {"avx512vl", "+avx512vl", 4},
      {"avx512_vnni", "+avx512vnni", 5},
      {"avx512_bf16", "+avx512bf16", 5},
      {"avx512ifma", "+avx512ifma", 5},
      {"avx512vbmi", "+avx512vbmi", 5},
      {"avx_vnni", "+avxvnni", 5},
  };
  const size_t n_features = sizeof features / sizeof *features;
  /* The level: the highest whose flags, and every lower level's, are all there. */
  int level = 1;
  for (int next = 2; next <= 4 && level == next - 1; ++next) {
    int all = 1;
    for (size_t i = 0; i < n_features; ++i)
      if (features[i].level == next) all &= has_word(flags, features[i].flag);
    if (all) level = next;
  }
  if (level == 1)
    copy(d->cpu, sizeof d->cpu, "x86-64");
  else
    snprintf(d->cpu, sizeof d->cpu, "x86-64-v%d", level);
  /* What the CPU has beyond its level: a virtual machine that hides one flag of a level (lzcnt,
     "abm", is often missing) would otherwise leave AVX2 and AVX-512 unused, and the features no
     level names (AVX-512 VNNI, BF16, ...) are worth having. (kiln adds evex512 to a list that
     turns AVX-512 on.) */
  for (size_t i = 0; i < n_features; ++i) {
    if (level >= features[i].level || !has_word(flags, features[i].flag)) continue;
    size_t len = strlen(d->features);
    snprintf(d->features + len, sizeof d->features - len, "%s%s", len ? "," : "",
             features[i].feature);
  }
}
#elif defined(__aarch64__)
static void detect_cpu(device_info* d) {
  copy(d->triple, sizeof d->triple, "aarch64-linux-gnu");
  copy(d->cpu, sizeof d->cpu, "generic");
  char flags[4096];
  cpuinfo_field("Features", flags, sizeof flags);
  cpuinfo_field("model name", d->cpu_model, sizeof d->cpu_model);
  if (!d->cpu_model[0]) {
    char part[64], implementer[64];
    cpuinfo_field("CPU implementer", implementer, sizeof implementer);
    cpuinfo_field("CPU part", part, sizeof part);
    if (part[0])
      snprintf(d->cpu_model, sizeof d->cpu_model, "implementer %s part %s", implementer, part);
  }
  /* /proc/cpuinfo's names and LLVM's for what code generation can use. */
  static const char* const names[][2] = {
      {"asimd", "+neon"}, {"fp", "+fp-armv8"}, {"asimddp", "+dotprod"}, {"fphp", "+fullfp16"},
      {"sve", "+sve"},    {"i8mm", "+i8mm"},   {"bf16", "+bf16"},       {"atomics", "+lse"}};
  for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
    if (!has_word(flags, names[i][0])) continue;
    size_t len = strlen(d->features);
    snprintf(d->features + len, sizeof d->features - len, "%s%s", len ? "," : "", names[i][1]);
  }
}
#else
static void detect_cpu(device_info* d) {
  copy(d->triple, sizeof d->triple, "unknown");
  cpuinfo_field("model name", d->cpu_model, sizeof d->cpu_model);
}
#endif

#if !defined(KILN_AGENT_STATIC)
/* GPUs through the driver API, opened at run time: the agent links no CUDA library. */
static void query_gpus(device_info* d) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    copy(d->gpu_note, sizeof d->gpu_note, "no libcuda.so.1");
    return;
  }
  typedef int (*init_fn)(unsigned);
  typedef int (*count_fn)(int*);
  typedef int (*get_fn)(int*, int);
  typedef int (*name_fn)(char*, int, int);
  typedef int (*attr_fn)(int*, int, int);
  typedef int (*mem_fn)(size_t*, int);
  init_fn init = (init_fn)dlsym(cuda, "cuInit");
  count_fn count = (count_fn)dlsym(cuda, "cuDeviceGetCount");
  get_fn get = (get_fn)dlsym(cuda, "cuDeviceGet");
  name_fn name = (name_fn)dlsym(cuda, "cuDeviceGetName");
  attr_fn attr = (attr_fn)dlsym(cuda, "cuDeviceGetAttribute");
  mem_fn mem = (mem_fn)dlsym(cuda, "cuDeviceTotalMem_v2");
  int n = 0;
  if (!init || !count || !get || !name || !attr || !mem || init(0) != 0 || count(&n) != 0) {
    copy(d->gpu_note, sizeof d->gpu_note, "libcuda.so.1 is there but reports no device");
    return;
  }
  enum { COMPUTE_MAJOR = 75, COMPUTE_MINOR = 76 }; /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_* */
  for (int i = 0; i < n && d->gpu_count < DEVICE_MAX_GPUS; ++i) {
    int dev = 0;
    if (get(&dev, i) != 0) continue;
    device_gpu* g = &d->gpus[d->gpu_count++];
    g->ordinal = i;
    if (name(g->name, (int)sizeof g->name, dev) != 0) copy(g->name, sizeof g->name, "?");
    attr(&g->compute_major, COMPUTE_MAJOR, dev);
    attr(&g->compute_minor, COMPUTE_MINOR, dev);
    size_t bytes = 0;
    if (mem(&bytes, dev) == 0) g->memory_bytes = bytes;
  }
}
#endif

/* The GPUs, asked in a child process: CUDA initialized in the agent itself would be unusable in
   the children it forks for jobs, which are where GPU jobs run. */
static void detect_gpus(device_info* d) {
#if defined(KILN_AGENT_STATIC)
  /* A static binary cannot load the driver's shared library reliably. */
  copy(d->gpu_note, sizeof d->gpu_note, "a static kiln-agent does not load libcuda");
  return;
#else
  typedef struct {
    int count;
    device_gpu gpus[DEVICE_MAX_GPUS];
    char note[DEVICE_TEXT];
  } answer;
  int p[2];
  if (pipe(p) != 0) {
    copy(d->gpu_note, sizeof d->gpu_note, "cannot make a pipe to ask for GPUs");
    return;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    copy(d->gpu_note, sizeof d->gpu_note, "cannot fork to ask for GPUs");
    return;
  }
  if (pid == 0) {
    close(p[0]);
    device_info probe;
    memset(&probe, 0, sizeof probe);
    query_gpus(&probe);
    answer a;
    memset(&a, 0, sizeof a);
    a.count = probe.gpu_count;
    memcpy(a.gpus, probe.gpus, sizeof a.gpus);
    copy(a.note, sizeof a.note, probe.gpu_note);
    _exit(write(p[1], &a, sizeof a) == (ssize_t)sizeof a ? 0 : 1);
  }
  close(p[1]);
  answer a;
  size_t got = 0;
  while (got < sizeof a) {
    ssize_t k = read(p[0], (char*)&a + got, sizeof a - got);
    if (k <= 0) break;
    got += (size_t)k;
  }
  close(p[0]);
  waitpid(pid, NULL, 0);
  if (got != sizeof a) {
    copy(d->gpu_note, sizeof d->gpu_note, "the GPU probe process died (a broken driver?)");
    return;
  }
  d->gpu_count = a.count < 0 ? 0 : a.count > DEVICE_MAX_GPUS ? DEVICE_MAX_GPUS : a.count;
  memcpy(d->gpus, a.gpus, sizeof d->gpus);
  copy(d->gpu_note, sizeof d->gpu_note, a.note);
#endif
}

/* A core's caches as /sys/devices/system/cpu/cpu0/cache describes them ("48K", "1024K"). */
static void detect_caches(device_info* d) {
  for (int index = 0; index < 8; ++index) {
    char path[128], type[32] = "", size[32] = "";
    int level = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    int ok = fscanf(f, "%d", &level) == 1;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", index);
    f = fopen(path, "r");
    ok = ok && f != NULL && fscanf(f, "%31s", type) == 1;
    if (f != NULL) fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    f = fopen(path, "r");
    ok = ok && f != NULL && fscanf(f, "%31s", size) == 1;
    if (f != NULL) fclose(f);
    if (!ok || strcmp(type, "Instruction") == 0) continue;
    char* end = NULL;
    unsigned long long n = strtoull(size, &end, 10);
    uint64_t bytes = *end == 'K' ? n << 10 : *end == 'M' ? n << 20 : *end == '\0' ? n : 0;
    if (level == 1) d->l1d_bytes = bytes;
    if (level == 2) d->l2_bytes = bytes;
    if (level == 3) d->l3_bytes = bytes;
  }
}

void device_detect(device_info* d) {
  memset(d, 0, sizeof *d);
  detect_cpu(d);
  struct utsname u;
  if (uname(&u) == 0) snprintf(d->os, sizeof d->os, "%s %s", u.sysname, u.release);
  /* The runtime's plan, without starting a pool in a process that runs no kernel. */
  d->threads = kiln_runtime_default_threads();
  d->cores = d->threads; /* one thread per physical core it may use, unless KILN_NUM_THREADS */
  detect_caches(d);
  struct sysinfo si;
  if (sysinfo(&si) == 0) d->memory_bytes = (uint64_t)si.totalram * si.mem_unit;
  detect_gpus(d);
}

int device_select_gpus(device_info* d, const char* list, char* err, size_t len) {
  long wanted[DEVICE_MAX_GPUS];
  int n = 0;
  for (const char* p = list;;) {
    char* end = NULL;
    long ordinal = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || ordinal < 0 || n == DEVICE_MAX_GPUS) {
      snprintf(err, len, "--gpu '%s': expected GPU numbers separated by commas (0,2)", list);
      return -1;
    }
    wanted[n++] = ordinal;
    if (!*end) break;
    p = end + 1;
  }
  device_gpu chosen[DEVICE_MAX_GPUS];
  for (int k = 0; k < n; ++k) {
    int found = -1;
    for (int g = 0; g < d->gpu_count; ++g)
      if (d->gpus[g].ordinal == wanted[k]) found = g;
    if (found < 0) {
      if (d->gpu_count == 0)
        snprintf(err, len, "--gpu %ld: this machine has no GPU (%s)", wanted[k], d->gpu_note);
      else
        snprintf(err, len, "--gpu %ld: this machine has GPU 0 to %d", wanted[k], d->gpu_count - 1);
      return -1;
    }
    chosen[k] = d->gpus[found];
  }
  memcpy(d->gpus, chosen, sizeof(device_gpu) * (size_t)n);
  d->gpu_count = n;
  return 0;
}

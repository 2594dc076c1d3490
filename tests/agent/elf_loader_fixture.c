/* A shared object for elf_loader_test that needs what kiln's kernels do not (their only
   relocations are JUMP_SLOTs): every relocation type the loader applies (RELATIVE, the 64-bit
   absolute one against an import and against a symbol of its own, GLOB_DAT against both),
   read-only data made read-only after relocation (RELRO), DT_INIT, DT_INIT_ARRAY, DT_FINI and
   DT_FINI_ARRAY, and a data import. Built freestanding, without a C library:

     cc -std=c11 -O2 -fPIC -shared -nostdlib -Wl,-z,now -Wl,--hash-style=both
        -Wl,-init=fixture_dt_init -Wl,-fini=fixture_dt_fini -o fixture.so elf_loader_fixture.c */
#include <stddef.h>
#include <stdint.h>

/* What the test program provides, as it provides the runtime to kernels. */
void* kiln_alloc(size_t bytes, size_t align);
void kiln_free(void* p);
double exp(double x);
extern int kiln_fixture_imported; /* a data import */

/* The order initializers and finalizers ran in: 'I' DT_INIT, 'a' and 'b' DT_INIT_ARRAY. The
   count is volatile: otherwise an optimizer (clang 19's GlobalOpt) may run the constructors at
   compile time, drop .init_array and leave "ab" in the initial data. */
static char init_log[8];
static volatile int init_len;
static char* fini_log; /* where finalizers write: 'z' DT_FINI_ARRAY, 'F' DT_FINI */
static int fini_len;

static void log_init(char c) {
  if (init_len < (int)sizeof init_log - 1) init_log[init_len++] = c;
}
static void log_fini(char c) {
  if (fini_log) fini_log[fini_len++] = c;
}

void fixture_dt_init(void) { log_init('I'); }
void fixture_dt_fini(void) { log_fini('F'); }
__attribute__((constructor(101))) static void init_a(void) { log_init('a'); }
__attribute__((constructor(102))) static void init_b(void) { log_init('b'); }
__attribute__((destructor)) static void fini_z(void) { log_fini('z'); }

/* Exported data, reached from code through the GOT: GLOB_DAT against the object's own symbol. */
int fixture_counter = 41;

static const int table[4] = {10, 20, 30, 40};
/* RELATIVE, in RELRO. */
static const int* const pointers[2] = {&table[1], &table[3]};
/* The 64-bit absolute relocation against an import and against the object's own symbol. */
void* (*const fixture_alloc_pointer)(size_t, size_t) = kiln_alloc;
int* const fixture_counter_pointer = &fixture_counter;

const char* fixture_init_log(void) { return init_log; }
void fixture_set_fini_log(char* log) { fini_log = log; }
int fixture_table_sum(void) { return *pointers[0] + *pointers[1]; }
int fixture_bump(void) { return ++*fixture_counter_pointer; }
int* fixture_counter_address(void) { return &fixture_counter; }
void* fixture_alloc(size_t bytes) { return fixture_alloc_pointer(bytes, 128); }
void fixture_free(void* p) { kiln_free(p); }                   /* JUMP_SLOT */
void* fixture_free_address(void) { return (void*)&kiln_free; } /* GLOB_DAT against an import */
double fixture_exp(double x) { return exp(x); }
int fixture_imported(void) { return kiln_fixture_imported; }
/* Where RELRO data lives, so the test can check that writes there fault. */
const void* fixture_relro_address(void) { return &pointers[0]; }

/* Loads kiln's kernel shared objects from memory, without the dynamic linker: the agent also runs
   as a static executable, where dlopen cannot resolve an object's symbols against the program.

   A kiln kernel is an ELF64 ET_DYN object linked by lld (-shared --hash-style=both -z now):
   position-independent, no DT_NEEDED, importing only the runtime (kiln_parallel_launch,
   kiln_alloc, kiln_free) and libm functions. The loader takes that and a little more (what a C
   compiler and either GNU ld or lld make of a freestanding shared object): PT_LOAD segments,
   RELA relocations of the machine's four dynamic types (RELATIVE, the 64-bit absolute one,
   GLOB_DAT, JUMP_SLOT), DT_HASH or DT_GNU_HASH, PT_GNU_RELRO, DT_INIT, DT_INIT_ARRAY, DT_FINI
   and DT_FINI_ARRAY. Anything else that would change what the object means (TLS, DT_NEEDED,
   REL or RELR relocations, text relocations, IFUNCs, an executable stack) is refused, naming it.

   Every offset, size and index read from the object is checked before use: a hostile or
   truncated object gets an error, never a crash of the loader. (What the object's code does
   once called, its initializers included, is another matter: the agent runs it in a sandboxed
   child.) Runs on x86-64 and little-endian aarch64 Linux; elsewhere every call fails with
   "unsupported machine". */
#ifndef KILN_AGENT_ELF_LOADER_H
#define KILN_AGENT_ELF_LOADER_H

#include <stddef.h>

/* A function or object the loaded code may import, by name. A table ends with name == NULL. */
typedef struct {
  const char* name;
  void* addr;
} kiln_symbol;

/* A loaded object. */
typedef struct kiln_elf kiln_elf;

/* Checks that `so` (size bytes, any alignment) is an object the loader can load on this machine
   and that each undefined dynamic symbol is in `imports` (NULL: none). Maps and runs nothing.
   0 when it is; else -1 with a message in err, such as "not an ELF file", "an aarch64 shared
   object, but this agent runs on x86-64", "needs 'foo', which this agent does not provide" or
   "has a TLS segment (PT_TLS), which the loader does not support". */
int kiln_elf_check(const void* so, size_t size, const kiln_symbol* imports, char* err,
                   size_t err_len);

/* Checks `so` as kiln_elf_check does, then maps its segments into one fresh reservation, applies
   its relocations, gives each page the protection of its segments (never writable and
   executable at once; PT_GNU_RELRO read-only after relocation) and runs its initializers
   (DT_INIT, then DT_INIT_ARRAY). `so` is not used after the call. NULL with a message in err on
   any failure, with nothing left mapped. */
kiln_elf* kiln_elf_load(const void* so, size_t size, const kiln_symbol* imports, char* err,
                        size_t err_len);

/* The address of the defined dynamic symbol `name` (global or weak), or NULL. Found through the
   object's DT_GNU_HASH table, else its DT_HASH table; reads only the loader's own copy of the
   symbol tables. To call a function, copy the address into a function pointer with memcpy. */
void* kiln_elf_symbol(const kiln_elf* elf, const char* name);

/* Runs the object's finalizers (DT_FINI_ARRAY backwards, then DT_FINI), unmaps it and frees
   `elf`. NULL is fine. */
void kiln_elf_unload(kiln_elf* elf);

#endif

/* The agent's ELF loader (agent/src/elf_loader.h) on objects that must be refused: every prefix
   of real kernels, thousands of seeded random mutations, and one hand-made fault per field the
   loader reads (each must be refused with a message saying what is wrong), a kernel for another
   machine, and a missing import. Nothing here may crash the loader; build it with
   -fsanitize=address,undefined too. No kernel is ever called, so the imports are names only.

   usage: elf_loader_hostile_test [--seed N] [--mutants N] [--verbose] [--foreign SO]... SO...
     SO       kiln kernels for this machine; the first must import kiln_parallel_launch (matmul)
     --foreign SO   a kernel for another machine, which must be refused as such (repeatable)
     --verbose      print the message of each hand-made fault
   Exit status 0 when every case passes; each failure is printed. */
#define _GNU_SOURCE
#include <elf.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elf_loader.h"

#if defined(__x86_64__)
#define HOST "x86-64"
#define OTHER_MACHINE EM_AARCH64
#define OTHER_NAME "an aarch64 shared object, but this agent runs on x86-64"
#define COPY_RELOC R_X86_64_COPY
#define COPY_NAME "R_X86_64_COPY"
#define TLS_RELOC R_X86_64_TPOFF64
#define TLS_NAME "R_X86_64_TPOFF64"
#elif defined(__aarch64__)
#define HOST "aarch64"
#define OTHER_MACHINE EM_X86_64
#define OTHER_NAME "an x86-64 shared object, but this agent runs on aarch64"
#define COPY_RELOC R_AARCH64_COPY
#define COPY_NAME "R_AARCH64_COPY"
#define TLS_RELOC R_AARCH64_TLS_TPREL
#define TLS_NAME "R_AARCH64_TLS_TPREL"
#else
#error "the loader's tests run on x86-64 and aarch64"
#endif

static int failures, cases, verbose;

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

static void dummy(void) {}

/* The names an agent provides; never called here. */
static kiln_symbol imports[32];
static kiln_symbol imports_without_launch[32];

static void make_imports(void) {
  /* The runtime, elf_loader_fixture.c's data, and the libm functions kiln lets a kernel import. */
  static const char* const runtime[] = {"kiln_parallel_launch", "kiln_alloc", "kiln_free",
                                        "kiln_fixture_imported"};
  static const char* const libm[] = {"expf",   "exp",   "logf",  "log",  "sinf",  "sin",
                                     "cosf",   "cos",   "powf",  "pow",  "sqrtf", "sqrt",
                                     "floorf", "floor", "ceilf", "ceil", "fabsf", "fabs"};
  void (*fn)(void) = dummy;
  void* addr;
  memcpy(&addr, &fn, sizeof addr);
  int n = 0, m = 0;
  for (size_t i = 0; i < sizeof runtime / sizeof runtime[0] + sizeof libm / sizeof libm[0]; ++i) {
    const char* name = i < 4 ? runtime[i] : libm[i - 4];
    imports[n++] = (kiln_symbol){name, addr};
    if (strcmp(name, "kiln_parallel_launch") != 0)
      imports_without_launch[m++] = (kiln_symbol){name, addr};
  }
}

static uint8_t* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t* data = len > 0 ? malloc((size_t)len) : NULL;
  if (data && fread(data, 1, (size_t)len, f) != (size_t)len) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *size = data ? (size_t)len : 0;
  return data;
}

/* A copy of exactly `size` bytes, so that the sanitizers catch any read past it. */
static uint8_t* dup_bytes(const uint8_t* so, size_t size) {
  uint8_t* m = malloc(size);
  if (m && size > 0) memcpy(m, so, size);
  return m;
}

/* The object must be refused, by kiln_elf_check and kiln_elf_load alike, with a message that
   holds `want` (any message when want is NULL). */
static void expect_refused(const uint8_t* so, size_t size, const kiln_symbol* with,
                           const char* want, const char* what) {
  char check_err[512] = "", load_err[512] = "";
  ++cases;
  int rc = kiln_elf_check(so, size, with, check_err, sizeof check_err);
  kiln_elf* elf = kiln_elf_load(so, size, with, load_err, sizeof load_err);
  if (rc == 0 || elf) {
    failf("%s: accepted (check %d, load %s)", what, rc, elf ? "ok" : load_err);
    kiln_elf_unload(elf);
    return;
  }
  if (check_err[0] == '\0' || strcmp(check_err, load_err) != 0)
    failf("%s: check says '%s', load says '%s'", what, check_err, load_err);
  else if (want && !strstr(check_err, want))
    failf("%s: the message '%s' does not say '%s'", what, check_err, want);
  else if (verbose)
    printf("    refused  %-44s %s\n", what, check_err);
}

/* ---- Reading the (valid, trusted) original to aim the faults ---- */

static uint64_t get(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  memcpy(&v, p, bytes); /* the tests run on little-endian machines only */
  return v;
}
static void put(uint8_t* p, size_t bytes, uint64_t v) { memcpy(p, &v, bytes); }

#define EH(field) offsetof(Elf64_Ehdr, field)
#define PH(field) offsetof(Elf64_Phdr, field), sizeof(((Elf64_Phdr*)0)->field)

/* The file offset of the nth program header of `type`, or 0. */
static size_t phdr(const uint8_t* so, uint32_t type, int nth) {
  uint64_t phoff = get(so + EH(e_phoff), 8);
  unsigned phnum = (unsigned)get(so + EH(e_phnum), 2);
  for (unsigned i = 0; i < phnum; ++i) {
    size_t at = phoff + i * sizeof(Elf64_Phdr);
    if (get(so + at, 4) == type && nth-- == 0) return at;
  }
  return 0;
}

static uint64_t ph_get(const uint8_t* so, size_t at, size_t field, size_t bytes) {
  return get(so + at + field, bytes);
}

/* The file offset of the dynamic entry `tag`, or 0. */
static size_t dyn(const uint8_t* so, uint64_t tag) {
  size_t d = phdr(so, PT_DYNAMIC, 0);
  uint64_t off = ph_get(so, d, PH(p_offset)), size = ph_get(so, d, PH(p_filesz));
  for (uint64_t at = off; at + 16 <= off + size; at += 16) {
    if (get(so + at, 8) == tag) return at;
    if (get(so + at, 8) == DT_NULL) break;
  }
  return 0;
}

/* The file offset of vaddr, through the PT_LOAD that holds it. */
static size_t file_offset(const uint8_t* so, uint64_t vaddr) {
  for (int i = 0;; ++i) {
    size_t at = phdr(so, PT_LOAD, i);
    if (!at) return 0;
    uint64_t v = ph_get(so, at, PH(p_vaddr)), fs = ph_get(so, at, PH(p_filesz));
    if (vaddr >= v && vaddr < v + fs) return ph_get(so, at, PH(p_offset)) + (vaddr - v);
  }
}

/* The smallest prefix of so that still holds everything the loader reads. */
static size_t needed_prefix(const uint8_t* so) {
  size_t need = get(so + EH(e_phoff), 8) + get(so + EH(e_phnum), 2) * sizeof(Elf64_Phdr);
  for (uint32_t type = PT_LOAD; type <= PT_DYNAMIC; ++type) {
    for (int i = 0;; ++i) {
      size_t at = phdr(so, type, i);
      if (!at) break;
      size_t end = ph_get(so, at, PH(p_offset)) + ph_get(so, at, PH(p_filesz));
      if (end > need) need = end;
    }
  }
  return need;
}

/* ---- Faults, one field at a time ---- */

/* Runs `edit` on a fresh copy of the original `so` named m, then expects it refused. */
#define FAULT(what, want, edit)                   \
  do {                                            \
    uint8_t* m = dup_bytes(so, size);             \
    edit;                                         \
    expect_refused(m, size, imports, want, what); \
    free(m);                                      \
  } while (0)

static void field_faults(const uint8_t* so, size_t size) {
  size_t text = 0, rw = 0, first = phdr(so, PT_LOAD, 0);
  for (int i = 0;; ++i) {
    size_t at = phdr(so, PT_LOAD, i);
    if (!at) break;
    uint32_t flags = (uint32_t)ph_get(so, at, PH(p_flags));
    if ((flags & PF_X) && !text) text = at;
    if ((flags & PF_W) && !rw) rw = at;
  }
  size_t dynamic = phdr(so, PT_DYNAMIC, 0), relro = phdr(so, PT_GNU_RELRO, 0);
  size_t stack = phdr(so, PT_GNU_STACK, 0), self = phdr(so, PT_PHDR, 0);
  size_t d_symtab = dyn(so, DT_SYMTAB), d_strtab = dyn(so, DT_STRTAB), d_strsz = dyn(so, DT_STRSZ);
  size_t d_hash = dyn(so, DT_HASH), d_gnu = dyn(so, DT_GNU_HASH), d_soname = dyn(so, DT_SONAME);
  size_t d_jmprel = dyn(so, DT_JMPREL), d_pltrelsz = dyn(so, DT_PLTRELSZ);
  size_t d_pltrel = dyn(so, DT_PLTREL), d_null = dyn(so, DT_NULL), d_syment = dyn(so, DT_SYMENT);
  if (!first || !text || !rw || !dynamic || !relro || !stack || !self || !d_symtab || !d_strtab ||
      !d_strsz || !d_hash || !d_gnu || !d_soname || !d_jmprel || !d_pltrelsz || !d_pltrel ||
      !d_null || !d_syment) {
    failf("the first object lacks a part of a kiln kernel the faults are aimed at");
    return;
  }
  size_t hash = file_offset(so, get(so + d_hash + 8, 8));
  size_t gnu = file_offset(so, get(so + d_gnu + 8, 8));
  size_t symtab = file_offset(so, get(so + d_symtab + 8, 8));
  size_t jmprel = file_offset(so, get(so + d_jmprel + 8, 8));
  uint32_t nsyms = (uint32_t)get(so + hash + 4, 4);
  size_t undefined = 0, function = 0; /* dynamic symbols: an import and a definition */
  for (uint32_t i = 1; i < nsyms; ++i) {
    size_t s = symtab + i * sizeof(Elf64_Sym);
    uint16_t shndx = (uint16_t)get(so + s + offsetof(Elf64_Sym, st_shndx), 2);
    if (shndx == SHN_UNDEF && !undefined) undefined = s;
    if (shndx != SHN_UNDEF && !function) function = s;
  }
  if (!hash || !gnu || !symtab || !jmprel || !undefined || !function) {
    failf("the first object's tables are not where its dynamic section says");
    return;
  }
  uint64_t text_vaddr = ph_get(so, text, PH(p_vaddr));
  uint64_t rw_vaddr = ph_get(so, rw, PH(p_vaddr));
  uint64_t text_end = text_vaddr + ph_get(so, text, PH(p_memsz));

  /* The ELF header. */
  expect_refused((const uint8_t*)"hello", 5, imports, "not an ELF file", "5 bytes of text");
  expect_refused(NULL, 0, imports, "not an ELF file", "nothing at all");
  expect_refused(so, 40, imports, "truncated", "40 bytes of the header");
  FAULT("a 32-bit class", "32-bit", m[EI_CLASS] = ELFCLASS32);
  FAULT("big-endian", "big-endian", m[EI_DATA] = ELFDATA2MSB);
  FAULT("ELF version 0", "ELF version", m[EI_VERSION] = 0);
  FAULT("another OS ABI", "OS ABI", m[EI_OSABI] = ELFOSABI_FREEBSD);
  FAULT("another machine", OTHER_NAME, put(m + EH(e_machine), 2, OTHER_MACHINE));
  FAULT("riscv", "a riscv shared object, but this agent runs on " HOST,
        put(m + EH(e_machine), 2, EM_RISCV));
  FAULT("an executable", "an executable (ET_EXEC)", put(m + EH(e_type), 2, ET_EXEC));
  FAULT("a relocatable object", "relocatable", put(m + EH(e_type), 2, ET_REL));
  FAULT("program headers past the end", "run past the end", put(m + EH(e_phoff), 8, size - 8));
  FAULT("program headers at 2^63", "run past the end", put(m + EH(e_phoff), 8, (uint64_t)1 << 63));
  FAULT("65535 program headers", "more than the loader's limit", put(m + EH(e_phnum), 2, 0xffff));
  FAULT("no program headers", "no program headers", put(m + EH(e_phnum), 2, 0));
  FAULT("32-byte program headers", "program headers of 32 bytes", put(m + EH(e_phentsize), 2, 32));

  /* The program headers. */
  FAULT("a segment past the end", "runs past the end", put(m + text + PH(p_offset), size));
  FAULT("a segment at offset 2^64 - 1", "runs past the end",
        put(m + text + PH(p_offset), UINT64_MAX));
  FAULT("a segment bigger than the file", "runs past the end",
        (put(m + text + PH(p_filesz), 2 * (uint64_t)size),
         put(m + text + PH(p_memsz), 2 * (uint64_t)size)));
  FAULT("more file bytes than memory", "more than its",
        put(m + text + PH(p_memsz), ph_get(so, text, PH(p_filesz)) - 1));
  FAULT("a segment at 2^63", "the loader's limit", put(m + text + PH(p_vaddr), (uint64_t)1 << 63));
  FAULT("a segment ending past 2^64", "the loader's limit",
        put(m + rw + PH(p_memsz), UINT64_MAX - 4096));
  FAULT("a 2 GiB segment", "more than the loader's limit of 1024 MiB",
        put(m + rw + PH(p_memsz), (uint64_t)2 << 30));
  FAULT("alignment 3", "not a power of two", put(m + text + PH(p_align), 3));
  FAULT("alignment 2^40", "alignment of", put(m + text + PH(p_align), (uint64_t)1 << 40));
  FAULT("a writable code segment", "both writable and executable",
        put(m + text + PH(p_flags), PF_R | PF_W | PF_X));
  FAULT("overlapping segments", "overlaps", put(m + text + PH(p_vaddr), 0));
  FAULT("writable data on a code page", "both writable and executable",
        (put(m + rw + PH(p_vaddr), text_end), put(m + relro + PH(p_type), PT_NULL),
         put(m + rw + PH(p_align), 1)));
  FAULT("no loadable segment", "no loadable segment",
        for (int i = 0; phdr(so, PT_LOAD, i); ++i) put(m + phdr(so, PT_LOAD, i), 4, PT_NULL));
  FAULT("no dynamic segment", "no dynamic segment", put(m + dynamic, 4, PT_NULL));
  FAULT("two dynamic segments", "two dynamic segments", put(m + self, 4, PT_DYNAMIC));
  FAULT("the dynamic segment past the end", "dynamic segment",
        put(m + dynamic + PH(p_offset), size));
  FAULT("a TLS segment", "has a TLS segment", put(m + stack, 4, PT_TLS));
  FAULT("an interpreter", "has an interpreter", put(m + self, 4, PT_INTERP));
  FAULT("an executable stack", "executable stack",
        put(m + stack + PH(p_flags), PF_R | PF_W | PF_X));
  FAULT("RELRO outside the writable segment", "RELRO", put(m + relro + PH(p_vaddr), text_vaddr));
  FAULT("RELRO past the span", "RELRO", put(m + relro + PH(p_memsz), (uint64_t)1 << 32));

  /* The dynamic section and its tables. */
  FAULT("no DT_NULL", "does not end with DT_NULL",
        put(m + dynamic + PH(p_filesz), d_null - ph_get(so, dynamic, PH(p_offset))));
  FAULT("DT_SYMTAB far away", "symbol table", put(m + d_symtab + 8, 8, (uint64_t)1 << 35));
  FAULT("no DT_SYMTAB", "no dynamic symbol table", put(m + d_symtab, 8, DT_DEBUG));
  FAULT("DT_STRTAB far away", "string table", put(m + d_strtab + 8, 8, (uint64_t)1 << 35));
  FAULT("DT_STRSZ past the file", "string table", put(m + d_strsz + 8, 8, size));
  FAULT("DT_SYMENT of 16", "DT_SYMENT", put(m + d_soname, 8, DT_SYMENT);
        put(m + d_soname + 8, 8, 16));
  FAULT("a DT_NEEDED library", "needs the library 'libkiln_", put(m + d_soname, 8, DT_NEEDED));
  FAULT("DT_NEEDED outside the strings", "named outside its string table",
        (put(m + d_soname, 8, DT_NEEDED), put(m + d_soname + 8, 8, UINT64_MAX)));
  FAULT("text relocations", "text relocations", put(m + d_soname, 8, DT_TEXTREL));
  FAULT("DF_TEXTREL", "text relocations",
        (put(m + d_soname, 8, DT_FLAGS), put(m + d_soname + 8, 8, DF_TEXTREL)));
  FAULT("static TLS", "static TLS",
        (put(m + d_soname, 8, DT_FLAGS), put(m + d_soname + 8, 8, DF_STATIC_TLS)));
  FAULT("DT_REL relocations", "DT_REL", put(m + d_soname, 8, DT_REL));
  FAULT("DT_RELR relocations", "DT_RELR", put(m + d_soname, 8, 36 /* DT_RELR */));
  FAULT("DT_PREINIT_ARRAY", "DT_PREINIT_ARRAY", put(m + d_soname, 8, DT_PREINIT_ARRAY));
  FAULT("PLT relocations of type DT_REL", "DT_REL", put(m + d_pltrel + 8, 8, DT_REL));
  FAULT("DT_PLTREL neither", "DT_PLTREL is", put(m + d_pltrel + 8, 8, 99));
  FAULT("DT_JMPREL far away", "DT_JMPREL", put(m + d_jmprel + 8, 8, (uint64_t)1 << 35));
  FAULT("DT_PLTRELSZ past the file", "runs past the file bytes",
        put(m + d_pltrelsz + 8, 8, 24 * (uint64_t)size));
  FAULT("DT_PLTRELSZ of 25", "whole number", put(m + d_pltrelsz + 8, 8, 25));
  FAULT("DT_PLTRELSZ without DT_JMPREL", "without its size", put(m + d_jmprel, 8, DT_DEBUG));
  FAULT("DT_INIT in data", "DT_INIT",
        (put(m + d_soname, 8, DT_INIT), put(m + d_soname + 8, 8, rw_vaddr)));
  FAULT("DT_FINI far away", "DT_FINI",
        (put(m + d_soname, 8, DT_FINI), put(m + d_soname + 8, 8, (uint64_t)1 << 39)));
  FAULT("DT_INIT_ARRAY without size", "without its size", put(m + d_soname, 8, DT_INIT_ARRAY));
  FAULT("DT_INIT_ARRAY in no segment", "not inside a loadable segment",
        (put(m + d_soname, 8, DT_INIT_ARRAY), put(m + d_soname + 8, 8, (uint64_t)1 << 39),
         put(m + d_syment, 8, DT_INIT_ARRAYSZ)));
  FAULT("no hash table", "no symbol hash table",
        (put(m + d_hash, 8, DT_DEBUG), put(m + d_gnu, 8, DT_DEBUG)));
  FAULT("DT_HASH far away", "DT_HASH", put(m + d_hash + 8, 8, (uint64_t)1 << 35));
  FAULT("DT_HASH with 2^32 - 1 symbols", "DT_HASH", put(m + hash + 4, 4, UINT32_MAX));
  FAULT("DT_HASH without buckets", "no buckets", put(m + hash, 4, 0));
  FAULT("DT_HASH chain past the symbols", "past its",
        put(m + hash + 8 + 4 * get(so + hash, 4), 4, nsyms + 5));
  FAULT("DT_GNU_HASH far away", "DT_GNU_HASH", put(m + d_gnu + 8, 8, (uint64_t)1 << 35));
  FAULT("DT_GNU_HASH without buckets", "no buckets", put(m + gnu, 4, 0));
  FAULT("DT_GNU_HASH Bloom filter of 3 words", "power of two", put(m + gnu + 8, 4, 3));
  FAULT("DT_GNU_HASH Bloom shift 32", "Bloom shift", put(m + gnu + 12, 4, 32));
  FAULT("DT_GNU_HASH with 2^32 - 1 buckets", "DT_GNU_HASH", put(m + gnu, 4, UINT32_MAX));
  FAULT("DT_GNU_HASH starting past the symbols", "DT_GNU_HASH", put(m + gnu + 4, 4, nsyms + 1));
  FAULT("DT_GNU_HASH alone, its buckets before its symbols", "before its first symbol",
        (put(m + d_hash, 8, DT_DEBUG), put(m + gnu + 4, 4, nsyms + 1)));

  /* Symbols. */
  FAULT("a symbol named past the strings", "named outside the string table",
        put(m + undefined + offsetof(Elf64_Sym, st_name), 4, UINT32_MAX));
  FAULT("a function outside the code", "not in an executable segment",
        put(m + function + offsetof(Elf64_Sym, st_value), 8, rw_vaddr));
  FAULT("a definition far away", "not in an executable segment",
        put(m + function + offsetof(Elf64_Sym, st_value), 8, (uint64_t)1 << 39));
  FAULT("a thread-local symbol", "thread-local",
        m[function + offsetof(Elf64_Sym, st_info)] = ELF64_ST_INFO(STB_GLOBAL, STT_TLS));
  FAULT("an IFUNC", "indirect function",
        m[function + offsetof(Elf64_Sym, st_info)] = ELF64_ST_INFO(STB_GLOBAL, STT_GNU_IFUNC));
  FAULT("a common symbol", "common symbol",
        put(m + function + offsetof(Elf64_Sym, st_shndx), 2, SHN_COMMON));
  FAULT("an import that is not there", "needs 'kiln_no_such",
        memcpy(m + file_offset(so, get(so + d_strtab + 8, 8)) +
                   get(so + undefined + offsetof(Elf64_Sym, st_name), 4),
               "kiln_no_such", 12));

  /* Relocations (the first one of DT_JMPREL). */
  size_t r = jmprel;
  uint64_t info = get(so + r + 8, 8);
  FAULT("a relocation of code", "outside the object's writable segments",
        put(m + r, 8, text_vaddr));
  FAULT("a relocation at 2^62", "outside the object's writable segments",
        put(m + r, 8, (uint64_t)1 << 62));
  FAULT("a relocation 4 bytes before the end of a segment", "outside the object's writable",
        put(m + r, 8, rw_vaddr + ph_get(so, rw, PH(p_memsz)) - 4));
  FAULT("a relocation of symbol 2^24", "past the",
        put(m + r + 8, 8, ELF64_R_INFO(1u << 24, ELF64_R_TYPE(info))));
  FAULT("a JUMP_SLOT without a symbol", "no symbol",
        put(m + r + 8, 8, ELF64_R_INFO(0, ELF64_R_TYPE(info))));
  FAULT("a COPY relocation", COPY_NAME,
        put(m + r + 8, 8, ELF64_R_INFO(ELF64_R_SYM(info), COPY_RELOC)));
  FAULT("a TLS relocation", TLS_NAME,
        put(m + r + 8, 8, ELF64_R_INFO(ELF64_R_SYM(info), TLS_RELOC)));
  FAULT("relocation type 57005", "type 57005",
        put(m + r + 8, 8, ELF64_R_INFO(ELF64_R_SYM(info), 57005)));

  /* Imports. */
  expect_refused(so, size, imports_without_launch,
                 "needs 'kiln_parallel_launch', which this agent does not provide",
                 "imports without kiln_parallel_launch");
  expect_refused(so, size, NULL, "needs 'kiln_parallel_launch'", "no imports at all");
}

/* ---- Prefixes ---- */

static void prefixes(const char* path, const uint8_t* so, size_t size) {
  size_t need = needed_prefix(so), refused = 0, loaded = 0;
  int before = failures, was_verbose = verbose;
  verbose = 0; /* thousands of "truncated" */
  char err[512];
  for (size_t n = 0; n <= size && failures - before < 5; ++n) {
    uint8_t* m = dup_bytes(so, n);
    if (n < need) {
      char what[128];
      snprintf(what, sizeof what, "%s cut to %zu bytes", path, n);
      expect_refused(m, n, imports, NULL, what);
      ++refused;
    } else {
      kiln_elf* elf = kiln_elf_load(m, n, imports, err, sizeof err);
      ++cases;
      if (!elf) failf("%s cut to %zu bytes (all it needs): %s", path, n, err);
      kiln_elf_unload(elf);
      ++loaded;
    }
    free(m);
  }
  verbose = was_verbose;
  printf("ok  %s: %zu prefixes shorter than the %zu bytes it needs refused, %zu longer loaded\n",
         path, refused, need, loaded);
}

/* ---- Seeded random mutations ---- */

static uint64_t rng;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(next_u64() % n) : 0; }

/* Whether the dynamic section of m (wherever its program headers now say it is) names an
   initializer or finalizer: such a mutant is only checked, not loaded, since loading it would
   run code at an address a mutation chose. */
static int names_initializers(const uint8_t* m, size_t size) {
  uint64_t phoff = get(m + EH(e_phoff), 8);
  unsigned phnum = (unsigned)get(m + EH(e_phnum), 2);
  for (unsigned i = 0; i < phnum && i < 64; ++i) {
    if (phoff > size || (i + 1) * sizeof(Elf64_Phdr) > size - phoff) break;
    const uint8_t* ph = m + phoff + i * sizeof(Elf64_Phdr);
    if (get(ph, 4) != PT_DYNAMIC) continue;
    uint64_t off = get(ph + offsetof(Elf64_Phdr, p_offset), 8);
    uint64_t len = get(ph + offsetof(Elf64_Phdr, p_filesz), 8);
    if (off > size) continue;
    uint64_t end = len > size - off ? size : off + len;
    for (uint64_t at = off; at + 16 <= end; at += 16) {
      uint64_t tag = get(m + at, 8);
      if (tag == DT_INIT || tag == DT_FINI || tag == DT_INIT_ARRAY || tag == DT_FINI_ARRAY)
        return 1;
    }
  }
  return 0;
}

static void mutants(const char* path, const uint8_t* so, size_t size, int count) {
  static const uint64_t edges[] = {0,
                                   1,
                                   7,
                                   8,
                                   16,
                                   24,
                                   0xff,
                                   0x1000,
                                   0x10000,
                                   0x7fffffff,
                                   0x80000000u,
                                   0xffffffffu,
                                   (uint64_t)1 << 32,
                                   (uint64_t)1 << 40,
                                   (uint64_t)1 << 63,
                                   UINT64_MAX,
                                   UINT64_MAX - 7};
  size_t d = phdr(so, PT_DYNAMIC, 0);
  uint64_t dyn_off = ph_get(so, d, PH(p_offset)), dyn_len = ph_get(so, d, PH(p_filesz));
  size_t hot = needed_prefix(so) < 1024 ? needed_prefix(so) : 1024; /* headers and tables */
  size_t refused = 0, loaded = 0, checked_only = 0, checked_refused = 0;
  char err[512], check_err[512];
  for (int i = 0; i < count && failures < 20; ++i) {
    uint8_t* m = dup_bytes(so, size);
    int edits = 1 + (int)below(4);
    for (int e = 0; e < edits; ++e) {
      /* Where: the headers and tables, the dynamic section, or anywhere. */
      size_t at = below(3) == 0   ? below(hot)
                  : below(3) == 0 ? dyn_off + below(dyn_len)
                                  : below(size);
      if (below(2)) {
        m[at] ^= (uint8_t)(1 + below(255));
      } else { /* an edge value over a field-sized run of bytes */
        size_t width = below(2) ? 8 : 4;
        if (at + width <= size) put(m + at, width, edges[below(sizeof edges / sizeof edges[0])]);
      }
    }
    int check = kiln_elf_check(m, size, imports, check_err, sizeof check_err);
    if (check != 0 && check_err[0] == '\0')
      failf("%s mutant %d: refused without a message", path, i);
    if (names_initializers(m, size)) {
      ++checked_only;
      checked_refused += check != 0;
    } else {
      kiln_elf* elf = kiln_elf_load(m, size, imports, err, sizeof err);
      if ((elf != NULL) != (check == 0))
        failf("%s mutant %d: check says %d (%s), load says %s", path, i, check, check_err,
              elf ? "ok" : err);
      if (elf) {
        /* Lookups read only the loader's copies of the tables: any name, any result. */
        kiln_elf_symbol(elf, "kiln_matmul");
        kiln_elf_symbol(elf, "kiln_parallel_launch");
        kiln_elf_symbol(elf, "");
        ++loaded;
      } else {
        ++refused;
      }
      kiln_elf_unload(elf);
    }
    ++cases;
    free(m);
  }
  printf(
      "ok  %s: %d mutants: %zu refused, %zu loaded; %zu naming initializers only checked, "
      "%zu of them refused\n",
      path, count, refused, loaded, checked_only, checked_refused);
}

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int count = 3000;
  make_imports();
  const char* paths[64];
  const char* foreign[16];
  int npaths = 0, nforeign = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = strtoull(argv[++i], NULL, 0);
    } else if (strcmp(argv[i], "--mutants") == 0 && i + 1 < argc) {
      count = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--verbose") == 0) {
      verbose = 1;
    } else if (strcmp(argv[i], "--foreign") == 0 && i + 1 < argc && nforeign < 16) {
      foreign[nforeign++] = argv[++i];
    } else if (argv[i][0] != '-' && npaths < 64) {
      paths[npaths++] = argv[i];
    } else {
      fprintf(stderr,
              "usage: elf_loader_hostile_test [--seed N] [--mutants N] [--verbose] "
              "[--foreign SO]... "
              "SO...\n");
      return 2;
    }
  }
  if (npaths == 0) {
    fprintf(stderr, "elf_loader_hostile_test: no shared object given\n");
    return 2;
  }
  for (int i = 0; i < nforeign; ++i) {
    size_t size;
    uint8_t* so = read_file(foreign[i], &size);
    if (!so) {
      failf("%s: cannot read it", foreign[i]);
      continue;
    }
    uint8_t* m = dup_bytes(so, size);
    expect_refused(m, size, imports, "shared object, but this agent runs on " HOST, foreign[i]);
    printf("ok  %s: refused as a shared object for another machine\n", foreign[i]);
    free(m);
    free(so);
  }
  for (int i = 0; i < npaths; ++i) {
    size_t size;
    uint8_t* so = read_file(paths[i], &size);
    if (!so) {
      failf("%s: cannot read it", paths[i]);
      continue;
    }
    char err[512];
    if (kiln_elf_check(so, size, imports, err, sizeof err) != 0) {
      failf("%s: the original is refused: %s", paths[i], err);
      free(so);
      continue;
    }
    if (i == 0) {
      int before = failures, before_cases = cases;
      field_faults(so, size);
      if (failures == before)
        printf("ok  %s: %d faults, one field at a time, each refused saying what is wrong\n",
               paths[i], cases - before_cases);
    }
    prefixes(paths[i], so, size);
    rng = seed * 1000003u + (uint64_t)i;
    mutants(paths[i], so, size, count);
    free(so);
  }
  if (failures) {
    printf("elf_loader_hostile_test: %d failures in %d cases\n", failures, cases);
    return 1;
  }
  printf("elf_loader_hostile_test: ok (%d cases)\n", cases);
  return 0;
}

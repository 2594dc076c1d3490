/* The in-memory loader of kiln's kernel shared objects (elf_loader.h). parse() reads and checks
   everything the loader will use into a layout, touching nothing but the file's bytes; loading
   then maps the layout, relocates, protects and initializes it. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "elf_loader.h"

#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef DT_RELR /* newer than some C libraries' elf.h */
#define DT_RELRSZ 35
#define DT_RELR 36
#endif

/* The machine the loader runs on, and its four dynamic relocation types. */
#if defined(__x86_64__)
#define HOST_NAME "x86-64"
enum {
  HOST_MACHINE = EM_X86_64,
  RELOC_NONE = R_X86_64_NONE,
  RELOC_RELATIVE = R_X86_64_RELATIVE,
  RELOC_ABS64 = R_X86_64_64,
  RELOC_GLOB_DAT = R_X86_64_GLOB_DAT,
  RELOC_JUMP_SLOT = R_X86_64_JUMP_SLOT
};
#elif defined(__aarch64__) && defined(__AARCH64EL__)
#define HOST_NAME "aarch64"
enum {
  HOST_MACHINE = EM_AARCH64,
  RELOC_NONE = R_AARCH64_NONE,
  RELOC_RELATIVE = R_AARCH64_RELATIVE,
  RELOC_ABS64 = R_AARCH64_ABS64,
  RELOC_GLOB_DAT = R_AARCH64_GLOB_DAT,
  RELOC_JUMP_SLOT = R_AARCH64_JUMP_SLOT
};
#else
#define HOST_UNSUPPORTED 1
#define HOST_NAME "an unsupported machine"
enum {
  HOST_MACHINE = EM_NONE, /* every object is refused before these are used */
  RELOC_NONE = 0,
  RELOC_RELATIVE = 0x7ffffff0,
  RELOC_ABS64,
  RELOC_GLOB_DAT,
  RELOC_JUMP_SLOT
};
#endif

/* Limits far above anything kiln makes, low enough that no header can make the loader reserve,
   allocate or loop over much. */
enum { MAX_PHNUM = 64, MAX_LOADS = 16, MAX_INIT_ENTRIES = 4096 };
#define MAX_SPAN ((uint64_t)1 << 30)  /* address space of all segments together */
#define MAX_ALIGN ((uint64_t)1 << 24) /* a segment's p_align */
#define MAX_VADDR ((uint64_t)1 << 40) /* the end of the highest segment, before relocation */

enum { SYM_SIZE = sizeof(Elf64_Sym), RELA_SIZE = sizeof(Elf64_Rela), DYN_SIZE = sizeof(Elf64_Dyn) };

typedef struct {
  int index; /* in the program header table, for messages */
  uint64_t vaddr, memsz, offset, filesz;
  uint32_t flags;
} segment;

/* A table the dynamic section points at. `at` is where its bytes are in the file (NULL: absent
   or empty); init and fini arrays are read from memory after relocation instead. */
typedef struct {
  int present;
  uint64_t vaddr, size;
  const uint8_t* at;
} table;

/* Everything parse() found and checked. */
typedef struct {
  const uint8_t* so;
  size_t size;
  const kiln_symbol* imports;
  char* err;
  size_t err_len;
  uint64_t page;
  segment loads[MAX_LOADS];
  int nloads;
  uint64_t lo, hi;                 /* the span of the segments, in whole pages */
  uint64_t align;                  /* what the span's first address must be aligned to */
  uint64_t relro_start, relro_end; /* equal when there is no PT_GNU_RELRO */
  table symtab, strtab, hash, gnu_hash, rela, jmprel, init_array, fini_array;
  uint32_t nsyms;
  int has_init, has_fini;
  uint64_t init, fini;
} layout;

struct kiln_elf {
  uint8_t* map; /* the reservation: [map, map + map_len) */
  size_t map_len;
  uint64_t bias; /* the address of vaddr 0 */
  /* The loader's own copies of the dynamic symbol tables, in `data`: lookups never read the
     mapped image, whose protections and contents the object controls. */
  const uint8_t *symtab, *strtab, *hash, *gnu_hash; /* hash or gnu_hash may be NULL */
  uint32_t nsyms;
  uint64_t strsz;
  int has_fini;
  uint64_t fini;        /* DT_FINI, a vaddr */
  uint64_t* fini_array; /* DT_FINI_ARRAY's entries after relocation: addresses, 0 to skip */
  size_t nfini;
  uint8_t data[];
};

static int fail(layout* l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(layout* l, const char* fmt, ...) {
  if (l->err && l->err_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err, l->err_len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* The file is little-endian; fields are read byte by byte, at any alignment. */
static uint16_t le16(const uint8_t* p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }
static uint32_t le32(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t* p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

#define FIELD(p, type, field) ((p) + offsetof(type, field))

static uint64_t page_down(uint64_t x, uint64_t page) { return x & ~(page - 1); }
static uint64_t page_up(uint64_t x, uint64_t page) { return (x + page - 1) & ~(page - 1); }

/* Whether [off, off + len) lies inside [0, size), without overflow. */
static int fits(uint64_t off, uint64_t len, uint64_t size) {
  return off <= size && len <= size - off;
}

static const char* string_in(const uint8_t* strtab, uint64_t strsz, uint64_t off) {
  if (off >= strsz || !memchr(strtab + off, '\0', strsz - off)) return NULL;
  return (const char*)strtab + off;
}

static const kiln_symbol* find_import(const kiln_symbol* imports, const char* name) {
  for (; imports && imports->name; ++imports) {
    if (strcmp(imports->name, name) == 0) return imports;
  }
  return NULL;
}

/* The segment holding [vaddr, vaddr + len) in memory, with all of `flags`; NULL if none. */
static const segment* segment_holding(const layout* l, uint64_t vaddr, uint64_t len,
                                      uint32_t flags) {
  for (int i = 0; i < l->nloads; ++i) {
    const segment* s = &l->loads[i];
    if ((s->flags & flags) == flags && vaddr >= s->vaddr && fits(vaddr - s->vaddr, len, s->memsz))
      return s;
  }
  return NULL;
}

static const char* machine_name(unsigned machine) {
  switch (machine) {
    case EM_X86_64:
      return "an x86-64";
    case EM_AARCH64:
      return "an aarch64";
    case EM_386:
      return "an i386";
    case EM_ARM:
      return "a 32-bit arm";
    case EM_RISCV:
      return "a riscv";
    case EM_PPC64:
      return "a ppc64";
    case EM_S390:
      return "an s390";
    case EM_MIPS:
      return "a mips";
    default:
      return NULL;
  }
}

static void reloc_name(uint32_t type, char* out, size_t len) {
  static const struct {
    uint32_t type;
    const char* name;
  } names[] = {
#define NAME(r) {r, #r}
#if defined(__x86_64__)
      NAME(R_X86_64_64),
      NAME(R_X86_64_GLOB_DAT),
      NAME(R_X86_64_JUMP_SLOT),
      NAME(R_X86_64_RELATIVE),
      NAME(R_X86_64_PC32),
      NAME(R_X86_64_GOT32),
      NAME(R_X86_64_PLT32),
      NAME(R_X86_64_COPY),
      NAME(R_X86_64_GOTPCREL),
      NAME(R_X86_64_32),
      NAME(R_X86_64_32S),
      NAME(R_X86_64_16),
      NAME(R_X86_64_PC16),
      NAME(R_X86_64_8),
      NAME(R_X86_64_PC8),
      NAME(R_X86_64_DTPMOD64),
      NAME(R_X86_64_DTPOFF64),
      NAME(R_X86_64_TPOFF64),
      NAME(R_X86_64_TLSGD),
      NAME(R_X86_64_TLSLD),
      NAME(R_X86_64_DTPOFF32),
      NAME(R_X86_64_GOTTPOFF),
      NAME(R_X86_64_TPOFF32),
      NAME(R_X86_64_PC64),
      NAME(R_X86_64_GOTOFF64),
      NAME(R_X86_64_GOTPC32),
      NAME(R_X86_64_SIZE32),
      NAME(R_X86_64_SIZE64),
      NAME(R_X86_64_TLSDESC),
      NAME(R_X86_64_IRELATIVE),
#elif defined(__aarch64__)
      NAME(R_AARCH64_ABS64),
      NAME(R_AARCH64_GLOB_DAT),
      NAME(R_AARCH64_JUMP_SLOT),
      NAME(R_AARCH64_RELATIVE),
      NAME(R_AARCH64_ABS32),
      NAME(R_AARCH64_ABS16),
      NAME(R_AARCH64_PREL64),
      NAME(R_AARCH64_PREL32),
      NAME(R_AARCH64_PREL16),
      NAME(R_AARCH64_COPY),
      NAME(R_AARCH64_TLS_DTPMOD),
      NAME(R_AARCH64_TLS_DTPREL),
      NAME(R_AARCH64_TLS_TPREL),
      NAME(R_AARCH64_TLSDESC),
      NAME(R_AARCH64_IRELATIVE),
#endif
#undef NAME
      {0, NULL}};
  for (size_t i = 0; names[i].name; ++i) {
    if (names[i].type == type) {
      snprintf(out, len, "%s (%" PRIu32 ")", names[i].name, type);
      return;
    }
  }
  snprintf(out, len, "%" PRIu32, type);
}

/* ---- The ELF header and the program headers ---- */

static int parse_header(layout* l, uint64_t* phoff, unsigned* phnum) {
  const uint8_t* h = l->so;
  if (l->size < SELFMAG || memcmp(h, ELFMAG, SELFMAG) != 0) return fail(l, "not an ELF file");
  if (l->size < sizeof(Elf64_Ehdr))
    return fail(l, "truncated: %zu bytes, less than the %zu of an ELF header", l->size,
                sizeof(Elf64_Ehdr));
  if (h[EI_CLASS] != ELFCLASS64)
    return fail(l, "a %s ELF file; the loader takes 64-bit objects only",
                h[EI_CLASS] == ELFCLASS32 ? "32-bit" : "bad-class");
  if (h[EI_DATA] != ELFDATA2LSB)
    return fail(l, "a %s ELF file; the loader takes little-endian objects only",
                h[EI_DATA] == ELFDATA2MSB ? "big-endian" : "bad-byte-order");
  uint32_t version = le32(FIELD(h, Elf64_Ehdr, e_version));
  if (h[EI_VERSION] != EV_CURRENT || version != EV_CURRENT)
    return fail(l, "ELF version %u, not %d", h[EI_VERSION] != EV_CURRENT ? h[EI_VERSION] : version,
                EV_CURRENT);
  if (h[EI_OSABI] != ELFOSABI_SYSV && h[EI_OSABI] != ELFOSABI_GNU)
    return fail(l, "an ELF file for OS ABI %u, not System V or GNU/Linux", h[EI_OSABI]);
  unsigned machine = le16(FIELD(h, Elf64_Ehdr, e_machine));
  if (machine != HOST_MACHINE) {
    const char* name = machine_name(machine);
    if (name) return fail(l, "%s shared object, but this agent runs on %s", name, HOST_NAME);
    return fail(l, "a shared object for ELF machine %u, but this agent runs on %s", machine,
                HOST_NAME);
  }
  switch (le16(FIELD(h, Elf64_Ehdr, e_type))) {
    case ET_DYN:
      break;
    case ET_EXEC:
      return fail(l, "an executable (ET_EXEC), not a shared object");
    case ET_REL:
      return fail(l, "a relocatable object (ET_REL), not a shared object");
    case ET_CORE:
      return fail(l, "a core dump (ET_CORE), not a shared object");
    default:
      return fail(l, "ELF type %u, not a shared object (ET_DYN)",
                  le16(FIELD(h, Elf64_Ehdr, e_type)));
  }
  unsigned phentsize = le16(FIELD(h, Elf64_Ehdr, e_phentsize));
  *phnum = le16(FIELD(h, Elf64_Ehdr, e_phnum));
  *phoff = le64(FIELD(h, Elf64_Ehdr, e_phoff));
  if (phentsize != sizeof(Elf64_Phdr))
    return fail(l, "program headers of %u bytes, not %zu", phentsize, sizeof(Elf64_Phdr));
  if (*phnum == 0) return fail(l, "no program headers");
  if (*phnum > MAX_PHNUM)
    return fail(l, "%u program headers, more than the loader's limit of %d", *phnum, MAX_PHNUM);
  if (!fits(*phoff, (uint64_t)*phnum * sizeof(Elf64_Phdr), l->size))
    return fail(l,
                "truncated: the %u program headers at offset %" PRIu64
                " run past the end of the %zu-byte file",
                *phnum, *phoff, l->size);
  return 0;
}

static int add_load(layout* l, int index, const uint8_t* ph) {
  segment s = {index,
               le64(FIELD(ph, Elf64_Phdr, p_vaddr)),
               le64(FIELD(ph, Elf64_Phdr, p_memsz)),
               le64(FIELD(ph, Elf64_Phdr, p_offset)),
               le64(FIELD(ph, Elf64_Phdr, p_filesz)),
               le32(FIELD(ph, Elf64_Phdr, p_flags))};
  uint64_t align = le64(FIELD(ph, Elf64_Phdr, p_align));
  if (s.filesz > s.memsz)
    return fail(l,
                "segment %d holds %" PRIu64 " bytes of the file, more than its %" PRIu64
                " bytes in memory",
                index, s.filesz, s.memsz);
  if (!fits(s.offset, s.filesz, l->size))
    return fail(l,
                "truncated: segment %d (%" PRIu64 " bytes at offset %" PRIu64
                ") runs past the end of the %zu-byte file",
                index, s.filesz, s.offset, l->size);
  if (!fits(s.vaddr, s.memsz, MAX_VADDR))
    return fail(l,
                "segment %d (%" PRIu64 " bytes at 0x%" PRIx64 ") ends past 0x%" PRIx64
                ", the loader's limit",
                index, s.memsz, s.vaddr, MAX_VADDR);
  if (align > 1 && (align & (align - 1)) != 0)
    return fail(l, "segment %d has an alignment of %" PRIu64 ", not a power of two", index, align);
  if (align > MAX_ALIGN)
    return fail(l,
                "segment %d asks for an alignment of %" PRIu64 ", more than the limit of %" PRIu64,
                index, align, MAX_ALIGN);
  if ((s.flags & PF_W) && (s.flags & PF_X))
    return fail(l, "segment %d is both writable and executable", index);
  if (s.memsz == 0) return 0; /* nothing to map */
  if (l->nloads == MAX_LOADS)
    return fail(l, "more than %d loadable segments, the loader's limit", MAX_LOADS);
  if (l->nloads > 0) {
    const segment* prev = &l->loads[l->nloads - 1];
    if (s.vaddr < prev->vaddr + prev->memsz)
      return fail(l,
                  "segment %d (at 0x%" PRIx64 ") overlaps or comes before segment %d (0x%" PRIx64
                  " to 0x%" PRIx64 "): loadable segments must be in increasing address order",
                  index, s.vaddr, prev->index, prev->vaddr, prev->vaddr + prev->memsz);
  }
  if (align > l->align) l->align = align;
  l->loads[l->nloads++] = s;
  return 0;
}

/* Reads the program headers: the loadable segments, RELRO, where the dynamic section is. */
static int parse_segments(layout* l, uint64_t phoff, unsigned phnum, uint64_t* dyn_off,
                          uint64_t* dyn_size) {
  int has_dynamic = 0, has_relro = 0;
  uint64_t relro_vaddr = 0, relro_size = 0;
  for (unsigned i = 0; i < phnum; ++i) {
    const uint8_t* ph = l->so + phoff + (uint64_t)i * sizeof(Elf64_Phdr);
    uint32_t type = le32(FIELD(ph, Elf64_Phdr, p_type));
    switch (type) {
      case PT_LOAD:
        if (add_load(l, (int)i, ph) != 0) return -1;
        break;
      case PT_DYNAMIC:
        if (has_dynamic) return fail(l, "two dynamic segments (PT_DYNAMIC)");
        has_dynamic = 1;
        *dyn_off = le64(FIELD(ph, Elf64_Phdr, p_offset));
        *dyn_size = le64(FIELD(ph, Elf64_Phdr, p_filesz));
        if (!fits(*dyn_off, *dyn_size, l->size))
          return fail(l,
                      "truncated: the dynamic segment (%" PRIu64 " bytes at offset %" PRIu64
                      ") runs past the end of the %zu-byte file",
                      *dyn_size, *dyn_off, l->size);
        break;
      case PT_GNU_RELRO:
        if (has_relro) return fail(l, "two PT_GNU_RELRO segments");
        has_relro = 1;
        relro_vaddr = le64(FIELD(ph, Elf64_Phdr, p_vaddr));
        relro_size = le64(FIELD(ph, Elf64_Phdr, p_memsz));
        break;
      case PT_TLS:
        return fail(l, "has a TLS segment (PT_TLS), which the loader does not support");
      case PT_INTERP:
        return fail(l, "has an interpreter (PT_INTERP): an executable, not a shared object");
      case PT_GNU_STACK:
        if (le32(FIELD(ph, Elf64_Phdr, p_flags)) & PF_X)
          return fail(l, "asks for an executable stack (PT_GNU_STACK)");
        break;
      default:
        break; /* PT_PHDR, PT_NOTE, PT_GNU_EH_FRAME, PT_GNU_PROPERTY, ...: nothing to do */
    }
  }
  if (l->nloads == 0) return fail(l, "no loadable segment (PT_LOAD)");
  if (!has_dynamic) return fail(l, "no dynamic segment (PT_DYNAMIC)");
  const segment* last = &l->loads[l->nloads - 1];
  l->lo = page_down(l->loads[0].vaddr, l->page);
  l->hi = page_up(last->vaddr + last->memsz, l->page);
  if (l->hi - l->lo > MAX_SPAN)
    return fail(
        l, "its segments span %" PRIu64 " MiB, more than the loader's limit of %" PRIu64 " MiB",
        (l->hi - l->lo) >> 20, MAX_SPAN >> 20);
  if (l->align < l->page) l->align = l->page;
  if (has_relro && relro_size > 0) {
    /* lld may end RELRO at a page boundary past the end of its segment: only its start must be
       in a writable segment. */
    if (!segment_holding(l, relro_vaddr, 1, PF_W) || !fits(relro_vaddr, relro_size, l->hi))
      return fail(l,
                  "its RELRO range (%" PRIu64 " bytes at 0x%" PRIx64
                  ") does not start in a writable segment or runs past the last one",
                  relro_size, relro_vaddr);
    l->relro_start = relro_vaddr;
    l->relro_end = relro_vaddr + relro_size;
  }
  return 0;
}

/* ---- Page protections ---- */

/* The protection of the page at vaddr p: readable, writable or executable when bytes of a
   segment with that flag lie on it, except that RELRO bytes do not make it writable. */
static int page_prot(const layout* l, uint64_t p) {
  uint64_t end = p + l->page;
  int prot = PROT_NONE;
  for (int i = 0; i < l->nloads; ++i) {
    const segment* s = &l->loads[i];
    uint64_t a = s->vaddr > p ? s->vaddr : p;
    uint64_t b = s->vaddr + s->memsz < end ? s->vaddr + s->memsz : end;
    if (a >= b) continue;
    if (s->flags & PF_R) prot |= PROT_READ;
    if (s->flags & PF_X) prot |= PROT_EXEC;
    if ((s->flags & PF_W) && (a < l->relro_start || b > l->relro_end)) prot |= PROT_WRITE;
  }
  return prot;
}

/* Gives every page of the span its protection (bias: where vaddr 0 is mapped), or with apply 0
   only checks that no page would be writable and executable. Pages between two consecutive
   segment or RELRO boundaries all get the same protection, so a few mprotect calls do. */
static int protect(layout* l, uint64_t bias, int apply) {
  uint64_t cuts[2 * MAX_LOADS + 4];
  int n = 0;
  cuts[n++] = l->lo;
  cuts[n++] = l->hi;
  for (int i = 0; i < l->nloads; ++i) {
    cuts[n++] = page_down(l->loads[i].vaddr, l->page);
    cuts[n++] = page_down(l->loads[i].vaddr + l->loads[i].memsz, l->page);
  }
  if (l->relro_end > l->relro_start) {
    cuts[n++] = page_down(l->relro_start, l->page);
    cuts[n++] = page_down(l->relro_end, l->page);
  }
  for (int i = 1; i < n; ++i) { /* insertion sort: a few dozen values */
    for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; --j) {
      uint64_t t = cuts[j];
      cuts[j] = cuts[j - 1];
      cuts[j - 1] = t;
    }
  }
  for (int i = 0; i + 1 < n; ++i) {
    if (cuts[i] == cuts[i + 1]) continue;
    /* The first page may hold a boundary; the pages after it up to the next cut hold none. */
    uint64_t runs[2][2] = {{cuts[i], cuts[i] + l->page}, {cuts[i] + l->page, cuts[i + 1]}};
    for (int r = 0; r < 2; ++r) {
      uint64_t a = runs[r][0], b = runs[r][1];
      if (a >= b) continue;
      int prot = page_prot(l, a);
      if ((prot & PROT_WRITE) && (prot & PROT_EXEC))
        return fail(l,
                    "the page at 0x%" PRIx64
                    " would be both writable and executable: "
                    "segments with those flags share it",
                    a);
      if (apply && mprotect((void*)(uintptr_t)(bias + a), b - a, prot) != 0)
        return fail(l, "cannot set the protection of 0x%" PRIx64 " bytes at 0x%" PRIx64 ": %s",
                    b - a, a, strerror(errno));
    }
  }
  return 0;
}

/* ---- The dynamic section and the tables it points at ---- */

/* Points t->at at the file bytes of [t->vaddr, t->vaddr + t->size), which must lie in the file
   part of one loadable segment. */
static int locate(layout* l, table* t, const char* what) {
  t->at = NULL;
  if (t->size == 0) return 0;
  for (int i = 0; i < l->nloads; ++i) {
    const segment* s = &l->loads[i];
    if (t->vaddr < s->vaddr || t->vaddr - s->vaddr >= s->filesz) continue;
    if (!fits(t->vaddr - s->vaddr, t->size, s->filesz))
      return fail(l,
                  "%s (%" PRIu64 " bytes at 0x%" PRIx64 ") runs past the file bytes of segment %d",
                  what, t->size, t->vaddr, s->index);
    t->at = l->so + s->offset + (t->vaddr - s->vaddr);
    return 0;
  }
  return fail(l, "%s (at 0x%" PRIx64 ") is not in the file bytes of any loadable segment", what,
              t->vaddr);
}

static int relocation_table(layout* l, table* t, const char* what, int has_size) {
  if (!t->present && !has_size) return 0;
  if (!t->present || !has_size)
    return fail(l, "%s without its size, or a size without %s", what, what);
  if (t->size % RELA_SIZE != 0)
    return fail(l, "%s is %" PRIu64 " bytes, not a whole number of %d-byte relocations", what,
                t->size, RELA_SIZE);
  return locate(l, t, what);
}

static int init_table(layout* l, table* t, const char* what, int has_size) {
  if (!t->present && !has_size) return 0;
  if (!t->present || !has_size)
    return fail(l, "%s without its size, or a size without %s", what, what);
  if (t->size % sizeof(uint64_t) != 0 || t->size / sizeof(uint64_t) > MAX_INIT_ENTRIES)
    return fail(l, "%s is %" PRIu64 " bytes, not a whole number of at most %d addresses", what,
                t->size, MAX_INIT_ENTRIES);
  if (t->size > 0 && !segment_holding(l, t->vaddr, t->size, 0))
    return fail(l, "%s (%" PRIu64 " bytes at 0x%" PRIx64 ") is not inside a loadable segment", what,
                t->size, t->vaddr);
  return 0;
}

static int parse_dynamic(layout* l, uint64_t dyn_off, uint64_t dyn_size) {
  int ended = 0, has_needed = 0, has_relasz = 0, has_pltrelsz = 0, has_strsz = 0;
  int has_init_arraysz = 0, has_fini_arraysz = 0;
  uint64_t needed = 0, pltrel = 0;
  for (uint64_t k = 0; k < dyn_size / DYN_SIZE && !ended; ++k) {
    const uint8_t* d = l->so + dyn_off + k * DYN_SIZE;
    uint64_t tag = le64(FIELD(d, Elf64_Dyn, d_tag)), val = le64(FIELD(d, Elf64_Dyn, d_un));
    switch (tag) {
      case DT_NULL:
        ended = 1;
        break;
      case DT_NEEDED:
        if (!has_needed) needed = val;
        has_needed = 1;
        break;
      case DT_HASH:
        l->hash.present = 1;
        l->hash.vaddr = val;
        break;
      case DT_GNU_HASH:
        l->gnu_hash.present = 1;
        l->gnu_hash.vaddr = val;
        break;
      case DT_SYMTAB:
        l->symtab.present = 1;
        l->symtab.vaddr = val;
        break;
      case DT_SYMENT:
        if (val != SYM_SIZE) return fail(l, "DT_SYMENT is %" PRIu64 ", not %d", val, SYM_SIZE);
        break;
      case DT_STRTAB:
        l->strtab.present = 1;
        l->strtab.vaddr = val;
        break;
      case DT_STRSZ:
        has_strsz = 1;
        l->strtab.size = val;
        break;
      case DT_RELA:
        l->rela.present = 1;
        l->rela.vaddr = val;
        break;
      case DT_RELASZ:
        has_relasz = 1;
        l->rela.size = val;
        break;
      case DT_RELAENT:
        if (val != RELA_SIZE) return fail(l, "DT_RELAENT is %" PRIu64 ", not %d", val, RELA_SIZE);
        break;
      case DT_JMPREL:
        l->jmprel.present = 1;
        l->jmprel.vaddr = val;
        break;
      case DT_PLTRELSZ:
        has_pltrelsz = 1;
        l->jmprel.size = val;
        break;
      case DT_PLTREL:
        pltrel = val;
        break;
      case DT_REL:
      case DT_RELSZ:
        return fail(l, "has DT_REL relocations (without addends), which the loader does not apply");
      case DT_RELR:
      case DT_RELRSZ:
        return fail(l,
                    "has packed relative relocations (DT_RELR), which the loader does not apply");
      case DT_TEXTREL:
        return fail(l, "has text relocations (DT_TEXTREL), which the loader does not apply");
      case DT_FLAGS:
        if (val & DF_TEXTREL)
          return fail(l, "has text relocations (DF_TEXTREL), which the loader does not apply");
        if (val & DF_STATIC_TLS)
          return fail(l, "uses static TLS (DF_STATIC_TLS), which the loader does not support");
        break;
      case DT_INIT:
        l->has_init = 1;
        l->init = val;
        break;
      case DT_FINI:
        l->has_fini = 1;
        l->fini = val;
        break;
      case DT_INIT_ARRAY:
        l->init_array.present = 1;
        l->init_array.vaddr = val;
        break;
      case DT_INIT_ARRAYSZ:
        has_init_arraysz = 1;
        l->init_array.size = val;
        break;
      case DT_FINI_ARRAY:
        l->fini_array.present = 1;
        l->fini_array.vaddr = val;
        break;
      case DT_FINI_ARRAYSZ:
        has_fini_arraysz = 1;
        l->fini_array.size = val;
        break;
      case DT_PREINIT_ARRAY:
      case DT_PREINIT_ARRAYSZ:
        return fail(l, "has DT_PREINIT_ARRAY, which only executables may have");
      default:
        break; /* DT_SONAME, DT_FLAGS_1, DT_DEBUG, DT_RELACOUNT, versions, ...: nothing to do */
    }
  }
  if (!ended) return fail(l, "its dynamic section does not end with DT_NULL");

  if (!l->symtab.present) return fail(l, "no dynamic symbol table (DT_SYMTAB)");
  if (!l->strtab.present || !has_strsz)
    return fail(l, "no dynamic string table (DT_STRTAB with DT_STRSZ)");
  if (locate(l, &l->strtab, "the dynamic string table (DT_STRTAB)") != 0) return -1;
  if (has_needed) {
    const char* name = l->strtab.at ? string_in(l->strtab.at, l->strtab.size, needed) : NULL;
    if (!name) return fail(l, "needs a library (DT_NEEDED) named outside its string table");
    return fail(l, "needs the library '%.80s' (DT_NEEDED); the loader links no libraries", name);
  }
  if (relocation_table(l, &l->rela, "DT_RELA", has_relasz) != 0) return -1;
  if (l->jmprel.present) {
    if (pltrel == DT_REL)
      return fail(l,
                  "its PLT relocations are DT_REL (without addends), which the loader does not "
                  "apply");
    if (pltrel != DT_RELA) return fail(l, "DT_PLTREL is %" PRIu64 ", not DT_RELA", pltrel);
  }
  if (relocation_table(l, &l->jmprel, "DT_JMPREL", has_pltrelsz) != 0) return -1;
  if (init_table(l, &l->init_array, "DT_INIT_ARRAY", has_init_arraysz) != 0 ||
      init_table(l, &l->fini_array, "DT_FINI_ARRAY", has_fini_arraysz) != 0)
    return -1;
  if (l->has_init && !segment_holding(l, l->init, 1, PF_X))
    return fail(l, "DT_INIT (0x%" PRIx64 ") is not in an executable segment", l->init);
  if (l->has_fini && !segment_holding(l, l->fini, 1, PF_X))
    return fail(l, "DT_FINI (0x%" PRIx64 ") is not in an executable segment", l->fini);
  return 0;
}

/* Checks the hash tables and counts the dynamic symbols: DT_HASH's nchain, else the end of
   DT_GNU_HASH's last chain. */
static int parse_hash_tables(layout* l) {
  if (!l->hash.present && !l->gnu_hash.present)
    return fail(l, "no symbol hash table (DT_HASH or DT_GNU_HASH) to count its symbols by");
  if (l->hash.present) {
    l->hash.size = 8;
    if (locate(l, &l->hash, "DT_HASH") != 0) return -1;
    uint32_t nbucket = le32(l->hash.at), nchain = le32(l->hash.at + 4);
    l->hash.size = 8 + 4 * ((uint64_t)nbucket + nchain);
    if (locate(l, &l->hash, "DT_HASH") != 0) return -1;
    if (nbucket == 0) return fail(l, "DT_HASH has no buckets");
    for (uint64_t i = 0; i < (uint64_t)nbucket + nchain; ++i) {
      if (le32(l->hash.at + 8 + 4 * i) >= nchain)
        return fail(l, "DT_HASH has an entry past its %" PRIu32 " symbols", nchain);
    }
    l->nsyms = nchain;
  }
  if (l->gnu_hash.present) {
    l->gnu_hash.size = 16;
    if (locate(l, &l->gnu_hash, "DT_GNU_HASH") != 0) return -1;
    const uint8_t* g = l->gnu_hash.at;
    uint32_t nbuckets = le32(g), symoffset = le32(g + 4), bloom_size = le32(g + 8);
    uint32_t bloom_shift = le32(g + 12);
    if (nbuckets == 0) return fail(l, "DT_GNU_HASH has no buckets");
    if (bloom_size == 0 || (bloom_size & (bloom_size - 1)) != 0)
      return fail(l, "DT_GNU_HASH has a Bloom filter of %" PRIu32 " words, not a power of two",
                  bloom_size);
    if (bloom_shift >= 32) /* the hashes are 32 bits */
      return fail(l, "DT_GNU_HASH has a Bloom shift of %" PRIu32 ", not below 32", bloom_shift);
    uint64_t head = 16 + 8 * (uint64_t)bloom_size + 4 * (uint64_t)nbuckets;
    l->gnu_hash.size = head;
    if (locate(l, &l->gnu_hash, "DT_GNU_HASH") != 0) return -1;
    const uint8_t* buckets = l->gnu_hash.at + 16 + 8 * (uint64_t)bloom_size;
    if (!l->hash.present) {
      uint32_t last = 0;
      for (uint32_t b = 0; b < nbuckets; ++b) {
        if (le32(buckets + 4 * (uint64_t)b) > last) last = le32(buckets + 4 * (uint64_t)b);
      }
      if (last == 0) {
        l->nsyms = symoffset;
      } else {
        if (last < symoffset)
          return fail(l, "DT_GNU_HASH has a bucket before its first symbol %" PRIu32, symoffset);
        /* Walk the last chain to its end: the entry with the low bit set. */
        for (uint64_t i = last;; ++i) {
          l->gnu_hash.size = head + 4 * (i - symoffset + 1);
          if (i >= UINT32_MAX || locate(l, &l->gnu_hash, "DT_GNU_HASH's last chain") != 0)
            return fail(l, "DT_GNU_HASH's last chain does not end inside the file");
          if (le32(l->gnu_hash.at + head + 4 * (i - symoffset)) & 1) {
            l->nsyms = (uint32_t)(i + 1);
            break;
          }
        }
      }
    }
    if (symoffset > l->nsyms)
      return fail(l, "DT_GNU_HASH starts at symbol %" PRIu32 ", past the %" PRIu32 " symbols",
                  symoffset, l->nsyms);
    l->gnu_hash.size = head + 4 * (uint64_t)(l->nsyms - symoffset);
    if (locate(l, &l->gnu_hash, "DT_GNU_HASH") != 0) return -1;
    for (uint32_t b = 0; b < nbuckets; ++b) {
      uint32_t first = le32(buckets + 4 * (uint64_t)b);
      if (first != 0 && (first < symoffset || first >= l->nsyms))
        return fail(l, "DT_GNU_HASH has a bucket outside its symbols %" PRIu32 " to %" PRIu32,
                    symoffset, l->nsyms);
    }
  }
  l->symtab.size = (uint64_t)l->nsyms * SYM_SIZE;
  return locate(l, &l->symtab, "the dynamic symbol table (DT_SYMTAB)");
}

/* Checks every dynamic symbol: a name inside the string table, no TLS or IFUNC, a definition
   inside the segments (a function in an executable one), and each undefined one imported. */
static int check_symbols(layout* l) {
  const segment* last = &l->loads[l->nloads - 1];
  for (uint32_t i = 1; i < l->nsyms; ++i) {
    const uint8_t* s = l->symtab.at + (uint64_t)i * SYM_SIZE;
    const char* name = string_in(l->strtab.at, l->strtab.size, le32(FIELD(s, Elf64_Sym, st_name)));
    unsigned char info = *FIELD(s, Elf64_Sym, st_info);
    unsigned type = ELF64_ST_TYPE(info), bind = ELF64_ST_BIND(info);
    uint16_t shndx = le16(FIELD(s, Elf64_Sym, st_shndx));
    uint64_t value = le64(FIELD(s, Elf64_Sym, st_value));
    if (!name) return fail(l, "dynamic symbol %" PRIu32 " is named outside the string table", i);
    if (type == STT_TLS)
      return fail(l, "symbol '%.80s' is thread-local (STT_TLS), which the loader does not support",
                  name);
    if (type == STT_GNU_IFUNC)
      return fail(l,
                  "symbol '%.80s' is an indirect function (STT_GNU_IFUNC), which the loader "
                  "does not support",
                  name);
    if (shndx == SHN_UNDEF) {
      if (name[0] == '\0') return fail(l, "dynamic symbol %" PRIu32 " is undefined and unnamed", i);
      if (bind != STB_WEAK && !find_import(l->imports, name))
        return fail(l, "needs '%.80s', which this agent does not provide", name);
    } else if (shndx == SHN_COMMON) {
      return fail(l, "symbol '%.80s' is a common symbol, which a shared object cannot have", name);
    } else if (shndx != SHN_ABS) {
      if (type == STT_FUNC && !segment_holding(l, value, 1, PF_X))
        return fail(l, "function '%.80s' (at 0x%" PRIx64 ") is not in an executable segment", name,
                    value);
      if (value < l->loads[0].vaddr || value > last->vaddr + last->memsz)
        return fail(l, "symbol '%.80s' (at 0x%" PRIx64 ") is outside the object's segments", name,
                    value);
    }
  }
  return 0;
}

/* The value of symbol i for a relocation: a definition in the object, an import, or 0 for an
   undefined weak symbol without one. */
static uint64_t symbol_value(const layout* l, uint32_t i, uint64_t bias) {
  if (i == 0) return 0;
  const uint8_t* s = l->symtab.at + (uint64_t)i * SYM_SIZE;
  uint16_t shndx = le16(FIELD(s, Elf64_Sym, st_shndx));
  uint64_t value = le64(FIELD(s, Elf64_Sym, st_value));
  if (shndx == SHN_ABS) return value;
  if (shndx != SHN_UNDEF) return bias + value;
  const char* name = string_in(l->strtab.at, l->strtab.size, le32(FIELD(s, Elf64_Sym, st_name)));
  const kiln_symbol* import = name ? find_import(l->imports, name) : NULL;
  return import ? (uint64_t)(uintptr_t)import->addr : 0;
}

/* Checks (apply 0) or applies (apply 1, the image mapped at bias) the relocations of t. */
static int relocate(layout* l, const table* t, const char* what, uint64_t bias, int apply) {
  for (uint64_t k = 0; k < t->size / RELA_SIZE; ++k) {
    const uint8_t* r = t->at + k * RELA_SIZE;
    uint64_t offset = le64(FIELD(r, Elf64_Rela, r_offset));
    uint64_t info = le64(FIELD(r, Elf64_Rela, r_info));
    uint64_t addend = le64(FIELD(r, Elf64_Rela, r_addend)); /* two's complement: wraps right */
    uint32_t type = ELF64_R_TYPE(info), sym = ELF64_R_SYM(info);
    if (type == RELOC_NONE) continue;
    if (!apply) {
      char name[64];
      if (type != RELOC_RELATIVE && type != RELOC_ABS64 && type != RELOC_GLOB_DAT &&
          type != RELOC_JUMP_SLOT) {
        reloc_name(type, name, sizeof name);
        return fail(l, "relocation %" PRIu64 " of %s has type %s, which the loader does not apply",
                    k, what, name);
      }
      if (!segment_holding(l, offset, sizeof(uint64_t), PF_W))
        return fail(l,
                    "relocation %" PRIu64 " of %s writes at 0x%" PRIx64
                    ", outside the object's writable segments",
                    k, what, offset);
      if (type != RELOC_RELATIVE && sym >= l->nsyms)
        return fail(l,
                    "relocation %" PRIu64 " of %s refers to symbol %" PRIu32 ", past the %" PRIu32
                    " in the symbol table",
                    k, what, sym, l->nsyms);
      if ((type == RELOC_GLOB_DAT || type == RELOC_JUMP_SLOT) && sym == 0) {
        reloc_name(type, name, sizeof name);
        return fail(l, "relocation %" PRIu64 " of %s has type %s but no symbol", k, what, name);
      }
      continue;
    }
    /* B + A for RELATIVE; S + A for the others (the x86-64 psABI says S for GLOB_DAT and
       JUMP_SLOT: linkers leave A zero there, and glibc and musl add it all the same). */
    uint64_t value = type == RELOC_RELATIVE ? bias + addend : symbol_value(l, sym, bias) + addend;
    memcpy((void*)(uintptr_t)(bias + offset), &value, sizeof value);
  }
  return 0;
}

static int parse(layout* l, const void* so, size_t size, const kiln_symbol* imports, char* err,
                 size_t err_len) {
  memset(l, 0, sizeof *l);
  l->so = so;
  l->size = so ? size : 0;
  l->imports = imports;
  l->err = err;
  l->err_len = err_len;
  if (err && err_len > 0) err[0] = '\0';
#ifdef HOST_UNSUPPORTED
  return fail(l, "unsupported machine: the loader runs on x86-64 and aarch64 Linux only");
#endif
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || (page & (page - 1)) != 0) return fail(l, "cannot tell this machine's page size");
  l->page = (uint64_t)page;
  uint64_t phoff = 0, dyn_off = 0, dyn_size = 0;
  unsigned phnum = 0;
  if (parse_header(l, &phoff, &phnum) != 0 ||
      parse_segments(l, phoff, phnum, &dyn_off, &dyn_size) != 0 || protect(l, 0, 0) != 0 ||
      parse_dynamic(l, dyn_off, dyn_size) != 0 || parse_hash_tables(l) != 0 ||
      check_symbols(l) != 0 || relocate(l, &l->rela, "DT_RELA", 0, 0) != 0 ||
      relocate(l, &l->jmprel, "DT_JMPREL", 0, 0) != 0)
    return -1;
  return 0;
}

int kiln_elf_check(const void* so, size_t size, const kiln_symbol* imports, char* err,
                   size_t err_len) {
  layout l;
  return parse(&l, so, size, imports, err, err_len);
}

/* ---- Loading ---- */

typedef void (*init_fn)(void);

static void call_at(uint64_t address) {
  /* ISO C converts no object pointer to a function pointer; POSIX guarantees the bits fit. */
  void* p = (void*)(uintptr_t)address;
  init_fn f;
  memcpy(&f, &p, sizeof f);
  f();
}

/* Reads an init or fini array from the relocated image: the addresses to call, 0 for the
   entries to skip (0 and -1, as the C runtime's own lists end). Each must be in an executable
   segment. */
static int read_init_array(layout* l, const table* t, const char* what, uint64_t bias,
                           uint64_t* out) {
  for (uint64_t k = 0; k < t->size / sizeof(uint64_t); ++k) {
    uint64_t address;
    memcpy(&address, (const void*)(uintptr_t)(bias + t->vaddr + 8 * k), sizeof address);
    if (address == 0 || address == UINT64_MAX) {
      out[k] = 0;
      continue;
    }
    if (!segment_holding(l, address - bias, 1, PF_X))
      return fail(l, "entry %" PRIu64 " of %s (0x%" PRIx64 ") is not in an executable segment", k,
                  what, address - bias);
    out[k] = address;
  }
  return 0;
}

/* The loaded object's handle, with its copies of the symbol tables. */
static kiln_elf* make_handle(const layout* l, uint64_t nfini) {
  uint64_t bytes = l->symtab.size + l->strtab.size + l->hash.size + l->gnu_hash.size;
  kiln_elf* e = malloc(sizeof *e + bytes);
  uint64_t* fini_array = nfini ? calloc(nfini, sizeof *fini_array) : NULL;
  if (!e || (nfini && !fini_array)) {
    free(e);
    free(fini_array);
    return NULL;
  }
  memset(e, 0, sizeof *e);
  uint8_t* p = e->data;
  const table* tables[] = {&l->symtab, &l->strtab, &l->hash, &l->gnu_hash};
  const uint8_t** copies[] = {&e->symtab, &e->strtab, &e->hash, &e->gnu_hash};
  for (int i = 0; i < 4; ++i) {
    if (tables[i]->at == NULL) continue;
    memcpy(p, tables[i]->at, tables[i]->size);
    *copies[i] = p;
    p += tables[i]->size;
  }
  e->nsyms = l->nsyms;
  e->strsz = l->strtab.size;
  e->fini_array = fini_array;
  e->nfini = nfini;
  return e;
}

kiln_elf* kiln_elf_load(const void* so, size_t size, const kiln_symbol* imports, char* err,
                        size_t err_len) {
  layout l;
  if (parse(&l, so, size, imports, err, err_len) != 0) return NULL;

  /* One reservation for the whole span, aligned as the segments ask. */
  uint64_t span = l.hi - l.lo, reserve = span + (l.align - l.page);
  void* raw = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    fail(&l, "cannot reserve %" PRIu64 " bytes of address space: %s", reserve, strerror(errno));
    return NULL;
  }
  uintptr_t start = ((uintptr_t)raw + (l.align - 1)) & ~(uintptr_t)(l.align - 1);
  if (start > (uintptr_t)raw) munmap(raw, start - (uintptr_t)raw);
  if ((uintptr_t)raw + reserve > start + span)
    munmap((void*)(start + span), (uintptr_t)raw + reserve - (start + span));
  uint64_t bias = (uint64_t)start - l.lo;
  kiln_elf* e = NULL;
  uint64_t* init_array = NULL;

  /* Every segment writable while it is filled and relocated; the reservation is fresh anonymous
     memory, so the bytes past each segment's file part (its bss) are already zero. */
  for (int i = 0; i < l.nloads; ++i) {
    const segment* s = &l.loads[i];
    uint64_t a = page_down(s->vaddr, l.page), b = page_up(s->vaddr + s->memsz, l.page);
    if (mprotect((void*)(uintptr_t)(bias + a), b - a, PROT_READ | PROT_WRITE) != 0) {
      fail(&l, "cannot make segment %d writable to fill it: %s", s->index, strerror(errno));
      goto failed;
    }
    if (s->filesz > 0) memcpy((void*)(uintptr_t)(bias + s->vaddr), l.so + s->offset, s->filesz);
  }
  /* parse() checked every relocation: applying them cannot fail. */
  relocate(&l, &l.rela, "DT_RELA", bias, 1);
  relocate(&l, &l.jmprel, "DT_JMPREL", bias, 1);

  uint64_t ninit = l.init_array.size / 8, nfini = l.fini_array.size / 8;
  init_array = ninit ? calloc(ninit, sizeof *init_array) : NULL;
  e = make_handle(&l, nfini);
  if ((ninit && !init_array) || !e) {
    fail(&l, "out of memory for the loaded object's tables");
    goto failed;
  }
  if (read_init_array(&l, &l.init_array, "DT_INIT_ARRAY", bias, init_array) != 0 ||
      read_init_array(&l, &l.fini_array, "DT_FINI_ARRAY", bias, e->fini_array) != 0)
    goto failed;

#if defined(__aarch64__)
  /* The code was written through the data cache: make the instruction cache see it. */
  for (int i = 0; i < l.nloads; ++i) {
    if (!(l.loads[i].flags & PF_X)) continue;
    char* a = (char*)(uintptr_t)(bias + l.loads[i].vaddr);
    __builtin___clear_cache(a, a + l.loads[i].memsz);
  }
#endif
  if (protect(&l, bias, 1) != 0) goto failed;

  e->map = (uint8_t*)start;
  e->map_len = span;
  e->bias = bias;
  e->has_fini = l.has_fini;
  e->fini = l.fini;
  if (l.has_init) call_at(bias + l.init);
  for (uint64_t k = 0; k < ninit; ++k) {
    if (init_array[k]) call_at(init_array[k]);
  }
  free(init_array);
  return e;

failed:
  munmap((void*)start, span);
  free(init_array);
  if (e) free(e->fini_array);
  free(e);
  return NULL;
}

/* ---- Symbols ---- */

/* The address of symbol i when it is a definition `name` may be looked up by, else NULL. */
static void* defined(const kiln_elf* e, uint32_t i, const char* name) {
  const uint8_t* s = e->symtab + (uint64_t)i * SYM_SIZE;
  unsigned bind = ELF64_ST_BIND(*FIELD(s, Elf64_Sym, st_info));
  uint16_t shndx = le16(FIELD(s, Elf64_Sym, st_shndx));
  const char* sym_name = string_in(e->strtab, e->strsz, le32(FIELD(s, Elf64_Sym, st_name)));
  if (shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK) || !sym_name ||
      strcmp(sym_name, name) != 0)
    return NULL;
  uint64_t value = le64(FIELD(s, Elf64_Sym, st_value));
  return (void*)(uintptr_t)(shndx == SHN_ABS ? value : e->bias + value);
}

static void* gnu_lookup(const kiln_elf* e, const char* name) {
  uint32_t h = 5381;
  for (const unsigned char* c = (const unsigned char*)name; *c; ++c) h = h * 33 + *c;
  const uint8_t* g = e->gnu_hash;
  uint32_t nbuckets = le32(g), symoffset = le32(g + 4), bloom_size = le32(g + 8);
  uint32_t shift = le32(g + 12);
  uint64_t word = le64(g + 16 + 8 * (uint64_t)((h / 64) % bloom_size));
  uint64_t mask = (uint64_t)1 << (h % 64) | (uint64_t)1 << (((uint64_t)h >> shift) % 64);
  if ((word & mask) != mask) return NULL;
  const uint8_t* buckets = g + 16 + 8 * (uint64_t)bloom_size;
  const uint8_t* chain = buckets + 4 * (uint64_t)nbuckets;
  uint32_t i = le32(buckets + 4 * (uint64_t)(h % nbuckets));
  if (i < symoffset) return NULL; /* 0: an empty bucket */
  for (; i < e->nsyms; ++i) {
    uint32_t h2 = le32(chain + 4 * (uint64_t)(i - symoffset));
    if ((h2 | 1) == (h | 1)) {
      void* p = defined(e, i, name);
      if (p) return p;
    }
    if (h2 & 1) break;
  }
  return NULL;
}

static void* sysv_lookup(const kiln_elf* e, const char* name) {
  uint32_t h = 0;
  for (const unsigned char* c = (const unsigned char*)name; *c; ++c) {
    h = (h << 4) + *c;
    uint32_t top = h & 0xf0000000u;
    h ^= top >> 24;
    h &= ~top;
  }
  uint32_t nbucket = le32(e->hash), nchain = le32(e->hash + 4);
  const uint8_t* chain = e->hash + 8 + 4 * (uint64_t)nbucket;
  /* parse() checked that every entry is below nchain; the step count stops a cycle. */
  uint32_t i = le32(e->hash + 8 + 4 * (uint64_t)(h % nbucket));
  for (uint32_t steps = 0; i != STN_UNDEF && i < nchain && steps < nchain; ++steps) {
    void* p = defined(e, i, name);
    if (p) return p;
    i = le32(chain + 4 * (uint64_t)i);
  }
  return NULL;
}

void* kiln_elf_symbol(const kiln_elf* elf, const char* name) {
  if (!elf || !name) return NULL;
  if (elf->gnu_hash) return gnu_lookup(elf, name);
  if (elf->hash) return sysv_lookup(elf, name);
  return NULL;
}

void kiln_elf_unload(kiln_elf* elf) {
  if (!elf) return;
  for (size_t k = elf->nfini; k-- > 0;) {
    if (elf->fini_array[k]) call_at(elf->fini_array[k]);
  }
  if (elf->has_fini) call_at(elf->bias + elf->fini);
  munmap(elf->map, elf->map_len);
  free(elf->fini_array);
  free(elf);
}

/* Aligned buffers for kernel arguments and temporaries.

   A kernel allocates its temporaries (cached copies, blocked layouts) on every call and frees
   them before it returns. The C library gives large blocks back to the system when they are
   freed (munmap, or a trim of the heap's top), so each call would fault its temporaries in
   again, page by page: on a virtual machine that cost a 1 MB-temporary convolution several
   times its arithmetic. Freed blocks of at least KILN_KEEP_MIN bytes are therefore kept, up
   to KILN_KEEP_SLOTS of them and KILN_KEEP_MAX bytes in all (a block freed when they are full
   goes back to the C library), and handed out again to a request of the same alignment that
   they fit without wasting more than half of themselves. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kiln/runtime.h"

/* A cache line: two buffers never share one, and vector loads never split one at the start. */
enum { KILN_MIN_ALIGN = 64 };

enum { KILN_KEEP_SLOTS = 16 };
static const size_t KILN_KEEP_MIN = (size_t)64 << 10;
static const size_t KILN_KEEP_MAX = (size_t)256 << 20;

/* Just below each block: what it is. The block starts `align` bytes into what posix_memalign
   gave, so the header never moves it off its alignment. */
typedef struct {
  void* base;
  size_t bytes;
  size_t align;
} block_header;

static block_header* header_of(void* p) { return (block_header*)p - 1; }

typedef struct {
  void* blocks[KILN_KEEP_SLOTS];
  size_t kept_bytes;
  pthread_mutex_t lock;
} keeper;

static keeper kept = {{NULL}, 0, PTHREAD_MUTEX_INITIALIZER};

/* A kept block for the request, taken out of the keeper, or NULL. */
static void* take_kept(size_t bytes, size_t align) {
  if (bytes < KILN_KEEP_MIN) return NULL;
  void* best = NULL;
  size_t slot = 0;
  pthread_mutex_lock(&kept.lock);
  for (size_t i = 0; i < KILN_KEEP_SLOTS; ++i) {
    void* p = kept.blocks[i];
    if (!p) continue;
    const block_header* h = header_of(p);
    if (h->align != align || h->bytes < bytes || h->bytes / 2 > bytes) continue;
    if (!best || h->bytes < header_of(best)->bytes) {
      best = p;
      slot = i;
    }
  }
  if (best) {
    kept.blocks[slot] = NULL;
    kept.kept_bytes -= header_of(best)->bytes;
  }
  pthread_mutex_unlock(&kept.lock);
  return best;
}

/* Keeps a freed block when a slot is free and the bytes kept stay within the limit; returns
   whether it did. */
static int keep(void* p) {
  const size_t bytes = header_of(p)->bytes;
  if (bytes < KILN_KEEP_MIN) return 0;
  int taken = 0;
  pthread_mutex_lock(&kept.lock);
  if (bytes <= KILN_KEEP_MAX - kept.kept_bytes) {
    for (size_t i = 0; i < KILN_KEEP_SLOTS && !taken; ++i) {
      if (kept.blocks[i]) continue;
      kept.blocks[i] = p;
      kept.kept_bytes += bytes;
      taken = 1;
    }
  }
  pthread_mutex_unlock(&kept.lock);
  return taken;
}

void* kiln_alloc(size_t bytes, size_t align) {
  if (align == 0 || align < KILN_MIN_ALIGN) {
    align = KILN_MIN_ALIGN;
  }
  if ((align & (align - 1)) != 0) {
    return NULL;
  }
  /* A zero-byte request still gets a distinct pointer, so NULL always means failure. */
  if (bytes == 0) bytes = 1;
  void* p = take_kept(bytes, align);
  if (p) return p;
  if (bytes > SIZE_MAX - align) return NULL;
  void* base = NULL;
  if (posix_memalign(&base, align, align + bytes) != 0) {
    return NULL;
  }
  p = (char*)base + align;
  block_header* h = header_of(p);
  h->base = base;
  h->bytes = bytes;
  h->align = align;
  return p;
}

void kiln_free(void* p) {
  if (!p) return;
  if (!keep(p)) free(header_of(p)->base);
}

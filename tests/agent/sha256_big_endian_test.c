/* sha256.c on a big-endian machine: FIPS 180-4 and RFC 4231 vectors, built freestanding for
   aarch64_be (no big-endian C library is installed) and run under qemu-aarch64_be:

     clang --target=aarch64_be-linux-gnu -ffreestanding -fno-builtin -nostdlib -static
           -fuse-ld=lld -std=c11 -O2 -Wall -Wextra -Werror -Iinclude_dir -Iagent/src
           -o sha256_big_endian_test tests/agent/sha256_big_endian_test.c agent/src/sha256.c
     qemu-aarch64_be sha256_big_endian_test

   where include_dir holds a string.h declaring memcpy, memset, memcmp and strlen (sha256.c
   includes <string.h>; this file defines them). Exit status 0 when every vector matches. */
#if !defined(__aarch64__) || !defined(__AARCH64EB__)
#error "built for aarch64_be only: elsewhere sha256_test checks the same vectors and more"
#endif
#include <stddef.h>
#include <stdint.h>

#include "kiln/sha256.h"

void* memcpy(void* to, const void* from, size_t n) {
  unsigned char* t = to;
  const unsigned char* f = from;
  while (n--) *t++ = *f++;
  return to;
}

void* memset(void* to, int c, size_t n) {
  unsigned char* t = to;
  while (n--) *t++ = (unsigned char)c;
  return to;
}

int memcmp(const void* a, const void* b, size_t n) {
  const unsigned char *x = a, *y = b;
  for (; n; --n, ++x, ++y) {
    if (*x != *y) return *x - *y;
  }
  return 0;
}

size_t strlen(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

static long syscall3(long number, long a, long b, long c) {
  register long x8 __asm__("x8") = number;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
  return x0;
}

static int differs(const uint8_t digest[32], const char* want) {
  char hex[65];
  kiln_hex(digest, 32, hex);
  return memcmp(hex, want, 65) != 0;
}

static uint8_t million[1000000];

void _start(void) {
  uint8_t d[32], key[131];
  int bad = 0;
  kiln_sha256("abc", 3, d);
  bad += differs(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  kiln_sha256("", 0, d);
  bad += differs(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  kiln_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, d);
  bad += differs(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  memset(million, 'a', sizeof million);
  kiln_sha256(million, sizeof million, d);
  bad += differs(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  kiln_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
  bad += differs(d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  memset(key, 0xaa, sizeof key);
  const char* msg = "Test Using Larger Than Block-Size Key - Hash Key First";
  kiln_hmac_sha256(key, sizeof key, msg, strlen(msg), d);
  bad += differs(d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");

  const char* line = bad ? "sha256_big_endian_test: FAIL\n" : "sha256_big_endian_test: ok\n";
  syscall3(64 /* write */, 1, (long)line, (long)strlen(line));
  syscall3(93 /* exit */, bad != 0, 0, 0);
  for (;;) {
  }
}

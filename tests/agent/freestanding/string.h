/* The four functions sha256.c needs from <string.h>, for the freestanding big-endian build of
   sha256_big_endian_test.c (which defines them): no big-endian C library is installed. */
#ifndef KILN_FREESTANDING_STRING_H
#define KILN_FREESTANDING_STRING_H
#include <stddef.h>
void* memcpy(void* to, const void* from, size_t n);
void* memset(void* to, int c, size_t n);
int memcmp(const void* a, const void* b, size_t n);
size_t strlen(const char* s);
#endif

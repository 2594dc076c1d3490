/* SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), in plain C: the agent's artifact keys and
   session MACs, and the check of a model's weights (kiln_model_open). Part of kiln's runtime. */
#ifndef KILN_SHA256_H
#define KILN_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* A hash in progress. Its fields are the algorithm's state; only the functions below touch them. */
typedef struct {
  uint32_t state[8];
  uint64_t bytes;    /* message bytes hashed so far */
  uint8_t block[64]; /* the current, incomplete block */
  size_t block_len;  /* bytes in block */
} kiln_sha256_ctx;

void kiln_sha256_init(kiln_sha256_ctx* ctx);
void kiln_sha256_update(kiln_sha256_ctx* ctx, const void* data, size_t n);
/* Writes the digest; ctx must be initialised again before it hashes anything else. */
void kiln_sha256_final(kiln_sha256_ctx* ctx, uint8_t out[32]);

/* The SHA-256 digest of n bytes at data (data may be NULL when n is 0). */
void kiln_sha256(const void* data, size_t n, uint8_t out[32]);

/* HMAC-SHA-256 of msg under key; a key longer than the 64-byte block is hashed first. */
void kiln_hmac_sha256(const void* key, size_t key_len, const void* msg, size_t msg_len,
                      uint8_t out[32]);

/* 1 when the two digests are equal, else 0, in time that does not depend on where they differ. */
int kiln_equal_32(const uint8_t a[32], const uint8_t b[32]);

/* Writes n bytes as 2n lowercase hex digits and a NUL: out holds 2n + 1 chars. */
void kiln_hex(const uint8_t* bytes, size_t n, char* out);

#endif

/* SHA-256 and HMAC-SHA-256 (sha256.h). Words are assembled from bytes, never loaded through
   casts, so the code is the same on any byte order and any alignment of the input. */
#include "kiln/sha256.h"

#include <string.h>

enum { BLOCK = 64, DIGEST = 32 };

/* FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first
   64 primes. */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32(const uint8_t* p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static void store_be32(uint8_t* p, uint32_t x) {
  p[0] = (uint8_t)(x >> 24);
  p[1] = (uint8_t)(x >> 16);
  p[2] = (uint8_t)(x >> 8);
  p[3] = (uint8_t)x;
}

/* FIPS 180-4, 6.2.2: one 64-byte block into the state. */
static void compress(uint32_t state[8], const uint8_t* block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void kiln_sha256_init(kiln_sha256_ctx* ctx) {
  /* FIPS 180-4, 5.3.3: the fractional parts of the square roots of the first 8 primes. */
  static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(ctx->state, H0, sizeof H0);
  ctx->bytes = 0;
  ctx->block_len = 0;
}

void kiln_sha256_update(kiln_sha256_ctx* ctx, const void* data, size_t n) {
  const uint8_t* p = data;
  if (n == 0) return;
  ctx->bytes += n;
  if (ctx->block_len > 0) {
    size_t take = BLOCK - ctx->block_len < n ? BLOCK - ctx->block_len : n;
    memcpy(ctx->block + ctx->block_len, p, take);
    ctx->block_len += take;
    p += take;
    n -= take;
    if (ctx->block_len < BLOCK) return;
    compress(ctx->state, ctx->block);
    ctx->block_len = 0;
  }
  for (; n >= BLOCK; p += BLOCK, n -= BLOCK) compress(ctx->state, p);
  if (n > 0) memcpy(ctx->block, p, n);
  ctx->block_len = n;
}

void kiln_sha256_final(kiln_sha256_ctx* ctx, uint8_t out[32]) {
  /* FIPS 180-4, 5.1.1: a 1 bit, zeros up to 56 bytes mod 64, then the length in bits. */
  uint64_t bits = ctx->bytes * 8;
  ctx->block[ctx->block_len++] = 0x80;
  if (ctx->block_len > BLOCK - 8) {
    memset(ctx->block + ctx->block_len, 0, BLOCK - ctx->block_len);
    compress(ctx->state, ctx->block);
    ctx->block_len = 0;
  }
  memset(ctx->block + ctx->block_len, 0, BLOCK - 8 - ctx->block_len);
  store_be32(ctx->block + BLOCK - 8, (uint32_t)(bits >> 32));
  store_be32(ctx->block + BLOCK - 4, (uint32_t)bits);
  compress(ctx->state, ctx->block);
  for (int i = 0; i < 8; ++i) store_be32(out + 4 * i, ctx->state[i]);
  memset(ctx, 0, sizeof *ctx);
}

void kiln_sha256(const void* data, size_t n, uint8_t out[32]) {
  kiln_sha256_ctx ctx;
  kiln_sha256_init(&ctx);
  kiln_sha256_update(&ctx, data, n);
  kiln_sha256_final(&ctx, out);
}

void kiln_hmac_sha256(const void* key, size_t key_len, const void* msg, size_t msg_len,
                      uint8_t out[32]) {
  /* RFC 2104: H((K ^ opad) || H((K ^ ipad) || msg)), K the key padded with zeros to a block. */
  uint8_t k[BLOCK] = {0};
  if (key_len > BLOCK) {
    kiln_sha256(key, key_len, k);
  } else if (key_len > 0) {
    memcpy(k, key, key_len);
  }
  uint8_t pad[BLOCK], inner[DIGEST];
  kiln_sha256_ctx ctx;
  for (int i = 0; i < BLOCK; ++i) pad[i] = k[i] ^ 0x36;
  kiln_sha256_init(&ctx);
  kiln_sha256_update(&ctx, pad, BLOCK);
  kiln_sha256_update(&ctx, msg, msg_len);
  kiln_sha256_final(&ctx, inner);
  for (int i = 0; i < BLOCK; ++i) pad[i] = k[i] ^ 0x5c;
  kiln_sha256_init(&ctx);
  kiln_sha256_update(&ctx, pad, BLOCK);
  kiln_sha256_update(&ctx, inner, DIGEST);
  kiln_sha256_final(&ctx, out);
  /* The key's traces are secrets too. volatile keeps the compiler from dropping the stores. */
  volatile uint8_t* wipe_k = k;
  volatile uint8_t* wipe_pad = pad;
  for (int i = 0; i < BLOCK; ++i) wipe_k[i] = wipe_pad[i] = 0;
}

int kiln_equal_32(const uint8_t a[32], const uint8_t b[32]) {
  /* OR the differences together and decide once at the end: no early exit, no branch on data. */
  volatile uint8_t diff = 0;
  for (int i = 0; i < DIGEST; ++i) diff |= (uint8_t)(a[i] ^ b[i]);
  return (int)(1 & (((unsigned)diff - 1) >> 8));
}

void kiln_hex(const uint8_t* bytes, size_t n, char* out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

/* SHA-256 and HMAC-SHA-256 of the agent (agent/src/sha256.h): the FIPS 180-4 and RFC 4231 test
   vectors, then the same digests as OpenSSL's libcrypto on thousands of random messages and keys,
   hashed whole and in random pieces, from unaligned addresses.

   usage: sha256_test [SEED]      exit 0 when every case passes; else prints each failing case */
#include "kiln/sha256.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void fail(const char* what, const char* got, const char* want) {
  ++failures;
  printf("FAIL %s\n  got  %s\n  want %s\n", what, got, want);
}

/* Compares the first `n` bytes of a digest with the expected hex. */
static void expect_hex(const char* what, const uint8_t* digest, size_t n, const char* want) {
  char got[2 * 32 + 1];
  kiln_hex(digest, n, got);
  if (strcmp(got, want) != 0) fail(what, got, want);
}

static void fips_vectors(void) {
  uint8_t d[32];
  kiln_sha256("", 0, d);
  expect_hex("sha256(\"\")", d, 32,
             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  kiln_sha256(NULL, 0, d);
  expect_hex("sha256(NULL, 0)", d, 32,
             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  kiln_sha256("abc", 3, d);
  expect_hex("sha256(\"abc\")", d, 32,
             "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char* m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  kiln_sha256(m448, strlen(m448), d);
  expect_hex("sha256(448-bit message)", d, 32,
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");

  /* One million 'a', whole and 1000 bytes at a time. */
  enum { MILLION = 1000000 };
  char* a = malloc(MILLION);
  if (!a) {
    fail("allocating a million bytes", "NULL", "a buffer");
    return;
  }
  memset(a, 'a', MILLION);
  const char* want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  kiln_sha256(a, MILLION, d);
  expect_hex("sha256(one million 'a')", d, 32, want);
  kiln_sha256_ctx ctx;
  kiln_sha256_init(&ctx);
  for (int i = 0; i < 1000; ++i) kiln_sha256_update(&ctx, a, 1000);
  kiln_sha256_final(&ctx, d);
  expect_hex("sha256(one million 'a', 1000 updates)", d, 32, want);
  free(a);
}

/* RFC 4231, section 4: test cases 1 to 7 (case 5's output truncated to 128 bits). */
static void rfc4231_vectors(void) {
  static const char case7[] =
      "This is a test using a larger than block-size key and a larger than block-size data. The "
      "key needs to be hashed before being used by the HMAC algorithm.";
  uint8_t k20_0b[20], k20_aa[20], k25[25], k20_0c[20], k131[131], d50_dd[50], d50_cd[50];
  memset(k20_0b, 0x0b, sizeof k20_0b);
  memset(k20_aa, 0xaa, sizeof k20_aa);
  for (int i = 0; i < 25; ++i) k25[i] = (uint8_t)(i + 1);
  memset(k20_0c, 0x0c, sizeof k20_0c);
  memset(k131, 0xaa, sizeof k131);
  memset(d50_dd, 0xdd, sizeof d50_dd);
  memset(d50_cd, 0xcd, sizeof d50_cd);
  struct {
    const char* name;
    const void* key;
    size_t key_len;
    const void* data;
    size_t data_len;
    size_t out_len;
    const char* want;
  } cases[] = {
      {"RFC 4231 case 1", k20_0b, 20, "Hi There", 8, 32,
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"RFC 4231 case 2", "Jefe", 4, "what do ya want for nothing?", 28, 32,
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {"RFC 4231 case 3", k20_aa, 20, d50_dd, 50, 32,
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {"RFC 4231 case 4", k25, 25, d50_cd, 50, 32,
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {"RFC 4231 case 5", k20_0c, 20, "Test With Truncation", 20, 16,
       "a3b6167473100ee06e0c796c2955552b"},
      {"RFC 4231 case 6", k131, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54,
       32, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {"RFC 4231 case 7", k131, 131, case7, sizeof case7 - 1, 32,
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    uint8_t mac[32];
    kiln_hmac_sha256(cases[i].key, cases[i].key_len, cases[i].data, cases[i].data_len, mac);
    expect_hex(cases[i].name, mac, cases[i].out_len, cases[i].want);
  }
}

static void helpers(void) {
  uint8_t a[32], b[32];
  for (int i = 0; i < 32; ++i) a[i] = b[i] = (uint8_t)(i * 37);
  if (kiln_equal_32(a, b) != 1) fail("kiln_equal_32 of equal digests", "0", "1");
  for (int i = 0; i < 32; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      b[i] ^= (uint8_t)(1u << bit);
      if (kiln_equal_32(a, b) != 0) {
        char what[80];
        snprintf(what, sizeof what, "kiln_equal_32 with byte %d bit %d different", i, bit);
        fail(what, "1", "0");
      }
      b[i] ^= (uint8_t)(1u << bit);
    }
  }
  char hex[9];
  kiln_hex((const uint8_t*)"\x00\x9f\xa0\xff", 4, hex);
  if (strcmp(hex, "009fa0ff") != 0) fail("kiln_hex", hex, "009fa0ff");
  kiln_hex(a, 0, hex);
  if (hex[0] != '\0') fail("kiln_hex of 0 bytes", hex, "");
}

/* splitmix64: a seeded generator, the same sequence everywhere. */
static uint64_t rng_state;
static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
static size_t below(size_t n) { return (size_t)(next_u64() % n); }

/* Hashes msg in random pieces (some empty) through the incremental API. */
static void sha256_in_pieces(const uint8_t* msg, size_t n, uint8_t out[32]) {
  kiln_sha256_ctx ctx;
  kiln_sha256_init(&ctx);
  size_t done = 0;
  while (done < n) {
    size_t left = n - done;
    /* Pieces of any size, and many of 0, 1 or 2 bytes. */
    size_t piece = below(4) == 0 ? below(left < 3 ? left + 1 : 3) : below(left + 1);
    kiln_sha256_update(&ctx, msg + done, piece);
    done += piece;
  }
  kiln_sha256_final(&ctx, out);
}

static void differential(int rounds) {
  enum { MAX_MSG = 1000, MAX_KEY = 200 };
  static uint8_t buf[MAX_MSG + 16], key_buf[MAX_KEY + 16];
  for (int r = 0; r < rounds; ++r) {
    size_t n = below(MAX_MSG + 1), key_len = below(MAX_KEY + 1);
    /* Unaligned starts: the hash reads bytes, never words. */
    uint8_t* msg = buf + below(16);
    uint8_t* key = key_buf + below(16);
    for (size_t i = 0; i < n; ++i) msg[i] = (uint8_t)next_u64();
    for (size_t i = 0; i < key_len; ++i) key[i] = (uint8_t)next_u64();

    uint8_t want[EVP_MAX_MD_SIZE], got[32];
    unsigned int want_len = 0;
    char what[160], want_hex[2 * EVP_MAX_MD_SIZE + 1], got_hex[65];
    if (EVP_Digest(msg, n, want, &want_len, EVP_sha256(), NULL) != 1 || want_len != 32) {
      fail("EVP_Digest", "an error", "a digest");
      return;
    }
    kiln_hex(want, 32, want_hex);
    kiln_sha256(msg, n, got);
    kiln_hex(got, 32, got_hex);
    if (memcmp(got, want, 32) != 0) {
      snprintf(what, sizeof what, "round %d: sha256 of %zu random bytes", r, n);
      fail(what, got_hex, want_hex);
    }
    sha256_in_pieces(msg, n, got);
    if (memcmp(got, want, 32) != 0) {
      kiln_hex(got, 32, got_hex);
      snprintf(what, sizeof what, "round %d: sha256 of %zu random bytes in pieces", r, n);
      fail(what, got_hex, want_hex);
    }

    if (!HMAC(EVP_sha256(), key, (int)key_len, msg, n, want, &want_len) || want_len != 32) {
      fail("HMAC", "an error", "a MAC");
      return;
    }
    kiln_hmac_sha256(key, key_len, msg, n, got);
    if (memcmp(got, want, 32) != 0) {
      kiln_hex(want, 32, want_hex);
      kiln_hex(got, 32, got_hex);
      snprintf(what, sizeof what, "round %d: hmac with a %zu-byte key of %zu random bytes", r,
               key_len, n);
      fail(what, got_hex, want_hex);
    }
    if (failures > 20) return;
  }
}

int main(int argc, char** argv) {
  rng_state = argc > 1 ? strtoull(argv[1], NULL, 0) : 20240611;
  fips_vectors();
  rfc4231_vectors();
  helpers();
  enum { ROUNDS = 5000 };
  differential(ROUNDS);
  if (failures) {
    printf("sha256_test: %d failures (seed %llu)\n", failures,
           (unsigned long long)(argc > 1 ? strtoull(argv[1], NULL, 0) : 20240611));
    return 1;
  }
  printf("sha256_test: ok (4 FIPS vectors, 7 RFC 4231 cases, %d random messages and keys)\n",
         ROUNDS);
  return 0;
}

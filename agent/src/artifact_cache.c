/* The agent's artifact cache (artifact_cache.h). */
#define _GNU_SOURCE
#include "artifact_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/sha256.h"

void cache_init(artifact_cache* c, size_t max_bytes) {
  memset(c, 0, sizeof *c);
  c->max_bytes = max_bytes;
}

void cache_free(artifact_cache* c) {
  for (size_t i = 0; i < c->count; ++i) free(c->items[i].code);
  free(c->items);
  memset(c, 0, sizeof *c);
}

const cached_artifact* cache_find(artifact_cache* c, const char* sha256) {
  for (size_t i = 0; i < c->count; ++i) {
    if (strcmp(c->items[i].sha256, sha256) == 0) {
      c->items[i].used = ++c->clock;
      return &c->items[i];
    }
  }
  return NULL;
}

static void evict_one(artifact_cache* c) {
  size_t oldest = 0;
  for (size_t i = 1; i < c->count; ++i)
    if (c->items[i].used < c->items[oldest].used) oldest = i;
  c->bytes -= c->items[oldest].len;
  free(c->items[oldest].code);
  c->items[oldest] = c->items[--c->count];
}

const cached_artifact* cache_put(artifact_cache* c, const char* sha256, const uint8_t* code,
                                 size_t len, char* err, size_t err_len) {
  uint8_t digest[32];
  char hex[65];
  kiln_sha256(code, len, digest);
  kiln_hex(digest, sizeof digest, hex);
  if (sha256 && sha256[0] && strcmp(sha256, hex) != 0) {
    snprintf(err, err_len, "the artifact's code has SHA-256 %s, not the %s the job names", hex,
             sha256);
    return NULL;
  }
  const cached_artifact* known = cache_find(c, hex);
  if (known) return known;
  while (c->count > 0 && c->bytes + len > c->max_bytes) evict_one(c);
  if (c->count == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 16;
    cached_artifact* grown = realloc(c->items, cap * sizeof *grown);
    if (!grown) {
      snprintf(err, err_len, "out of memory for the artifact cache");
      return NULL;
    }
    c->items = grown;
    c->cap = cap;
  }
  cached_artifact* a = &c->items[c->count];
  a->code = malloc(len ? len : 1);
  if (!a->code) {
    snprintf(err, err_len, "out of memory for an artifact of %zu bytes", len);
    return NULL;
  }
  memcpy(a->code, code, len);
  a->len = len;
  memcpy(a->sha256, hex, sizeof hex);
  a->used = ++c->clock;
  c->bytes += len;
  ++c->count;
  return a;
}

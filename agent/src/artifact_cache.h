/* The artifacts an agent holds, by the SHA-256 of their code, bounded in bytes: the least
   recently used go first. A tuner measures one artifact many times; kilnd sends the bytes
   once and then only the hash. */
#ifndef KILN_AGENT_ARTIFACT_CACHE_H
#define KILN_AGENT_ARTIFACT_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char sha256[65];
  uint8_t* code;
  size_t len;
  uint64_t used; /* a counter value: larger is more recent */
} cached_artifact;

typedef struct {
  cached_artifact* items;
  size_t count, cap;
  size_t bytes, max_bytes;
  uint64_t clock;
} artifact_cache;

void cache_init(artifact_cache* c, size_t max_bytes);
void cache_free(artifact_cache* c);

/* The artifact with this hash (marked used), or NULL. */
const cached_artifact* cache_find(artifact_cache* c, const char* sha256);

/* Keeps a copy of `code` under the SHA-256 of its bytes, which must equal `sha256` when that is
   not empty. The entry, or NULL with a message (a hash that does not match, no memory). An
   artifact larger than the whole cache is still kept, alone. */
const cached_artifact* cache_put(artifact_cache* c, const char* sha256, const uint8_t* code,
                                 size_t len, char* err, size_t err_len);

#endif

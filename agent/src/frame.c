/* Frames of the agent protocol (frame.h). */
#define _GNU_SOURCE
#include "frame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { HEADER = 4 };

static uint32_t read_be32(const uint8_t* p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

void frame_reader_init(frame_reader* r, size_t max_frame) {
  memset(r, 0, sizeof *r);
  r->max_frame = max_frame;
}

void frame_reader_free(frame_reader* r) {
  free(r->data);
  memset(r, 0, sizeof *r);
}

static int too_long(const frame_reader* r, char* err, size_t err_len) {
  if (r->len < HEADER) return 0;
  uint32_t n = read_be32(r->data);
  if (n <= r->max_frame) return 0;
  snprintf(err, err_len, "a frame of %u bytes, more than the limit of %zu", n, r->max_frame);
  return 1;
}

int frame_reader_feed(frame_reader* r, const void* bytes, size_t n, char* err, size_t err_len) {
  if (n == 0) return 0;
  /* Never hold more than one frame's header and body beyond what was handed out: a peer that
     announces a frame too long is refused before its body is stored. */
  if (too_long(r, err, err_len)) return -1;
  if (r->len + n > r->cap) {
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < r->len + n) cap *= 2;
    uint8_t* grown = realloc(r->data, cap);
    if (!grown) {
      snprintf(err, err_len, "out of memory for %zu received bytes", r->len + n);
      return -1;
    }
    r->data = grown;
    r->cap = cap;
  }
  memcpy(r->data + r->len, bytes, n);
  r->len += n;
  return too_long(r, err, err_len) ? -1 : 0;
}

int frame_reader_next(frame_reader* r, agent_frame** out, char* err, size_t err_len) {
  *out = NULL;
  if (r->len < HEADER) return 0;
  if (too_long(r, err, err_len)) return -1;
  size_t n = read_be32(r->data);
  if (r->len - HEADER < n) return 0;
  agent_frame* f = kiln__v1__agent_frame__unpack(NULL, n, r->data + HEADER);
  memmove(r->data, r->data + HEADER + n, r->len - HEADER - n);
  r->len -= HEADER + n;
  if (!f) {
    snprintf(err, err_len, "a frame of %zu bytes that is not an AgentFrame", n);
    return -1;
  }
  *out = f;
  return 1;
}

void frame_free(agent_frame* f) {
  if (f) kiln__v1__agent_frame__free_unpacked(f, NULL);
}

uint8_t* frame_pack(const agent_frame* f, size_t* len) {
  size_t n = kiln__v1__agent_frame__get_packed_size(f);
  if (n > UINT32_MAX) return NULL;
  uint8_t* out = malloc(HEADER + n);
  if (!out) return NULL;
  out[0] = (uint8_t)(n >> 24);
  out[1] = (uint8_t)(n >> 16);
  out[2] = (uint8_t)(n >> 8);
  out[3] = (uint8_t)n;
  kiln__v1__agent_frame__pack(f, out + HEADER);
  *len = HEADER + n;
  return out;
}

int write_all(int fd, const void* bytes, size_t len) {
  const uint8_t* p = bytes;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

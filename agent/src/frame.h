/* Frames of the agent protocol (proto/kiln/v1/agent.proto): a 4-byte big-endian length, then
   that many bytes of an AgentFrame. A frame reader takes bytes as they arrive and hands out
   whole frames; a length past the limit is refused before anything is allocated for it. */
#ifndef KILN_AGENT_FRAME_H
#define KILN_AGENT_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/v1/agent.pb-c.h"

typedef Kiln__V1__AgentFrame agent_frame;

/* Bytes received and not yet handed out as frames. */
typedef struct {
  uint8_t* data;
  size_t len, cap;
  size_t max_frame; /* the largest frame accepted, in bytes */
} frame_reader;

void frame_reader_init(frame_reader* r, size_t max_frame);
void frame_reader_free(frame_reader* r);

/* Appends bytes that arrived. -1 (with a message in err) when the frame they start announces
   more than max_frame bytes: the connection is to be closed. */
int frame_reader_feed(frame_reader* r, const void* bytes, size_t n, char* err, size_t err_len);

/* The next whole frame, unpacked: 1 with *out set (free it with frame_free), 0 when no whole
   frame has arrived yet, -1 with a message when the next frame does not unpack as an
   AgentFrame or announces more than max_frame bytes. */
int frame_reader_next(frame_reader* r, agent_frame** out, char* err, size_t err_len);

void frame_free(agent_frame* f);

/* A frame's bytes, length first: malloc'ed, *len set; NULL when out of memory. */
uint8_t* frame_pack(const agent_frame* f, size_t* len);

/* Writes all of `len` bytes to fd (blocking, retrying on EINTR). 0, or -1 with errno set. */
int write_all(int fd, const void* bytes, size_t len);

#endif

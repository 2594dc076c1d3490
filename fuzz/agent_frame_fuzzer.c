/* libFuzzer target: kiln-agent's frame decoder (agent/src/frame.h) on whatever bytes kilnd -- or
   anything else on the network -- might send. The first byte picks how the bytes are cut into
   reads, as recv() would cut them; every frame handed out is packed again and freed. Built two
   ways: with -fsanitize=fuzzer (fuzz_agent_frame, deploy/fuzz.sh), and with agent_frame_driver.c as
   a seeded test in ctest. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "frame.h"

/* A small limit, so that announced lengths past it are common in mutated inputs. */
enum { MAX_FRAME = 1 << 16 };

/* Packs a decoded frame again (the agent re-packs the result its job's child sent) and decodes
   that. The second decode may refuse what the first accepted: protobuf-c keeps an unknown field
   whose tag overflows 32 bits and packs it as field 0, which no decoder takes. Under ASan this
   checks that packing and decoding hostile structures stays in bounds. */
static void repack(const agent_frame* f) {
  size_t len = 0;
  uint8_t* bytes = frame_pack(f, &len);
  if (!bytes) return;
  if (len != 4 + kiln__v1__agent_frame__get_packed_size(f)) abort();
  frame_reader again;
  frame_reader_init(&again, (size_t)-1);
  char err[256];
  agent_frame* back = NULL;
  if (frame_reader_feed(&again, bytes, len, err, sizeof err) != 0) abort();
  if (frame_reader_next(&again, &back, err, sizeof err) == 1 && back->kind_case != f->kind_case)
    abort(); /* read back, it must be the same kind of frame */
  frame_free(back);
  frame_reader_free(&again);
  free(bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* Whole frames decoded and connections the decoder would close, for the seeded driver. */
unsigned long agent_frame_fuzz_frames, agent_frame_fuzz_refused;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t chunk = (size_t)data[0] % 17 + 1;
  data++;
  size--;
  frame_reader r;
  frame_reader_init(&r, MAX_FRAME);
  char err[256];
  int closed = 0;
  for (size_t at = 0; at < size && !closed; at += chunk) {
    size_t n = size - at < chunk ? size - at : chunk;
    if (frame_reader_feed(&r, data + at, n, err, sizeof err) != 0) {
      ++agent_frame_fuzz_refused;
      break;
    }
    for (;;) {
      agent_frame* f = NULL;
      int got = frame_reader_next(&r, &f, err, sizeof err);
      if (got <= 0) {
        closed = got < 0; /* the agent drops the connection */
        agent_frame_fuzz_refused += (unsigned long)closed;
        break;
      }
      ++agent_frame_fuzz_frames;
      repack(f);
      frame_free(f);
    }
  }
  frame_reader_free(&r);
  return 0;
}

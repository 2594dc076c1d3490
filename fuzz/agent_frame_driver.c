/* The agent frame decoder's fuzz target (agent_frame_fuzzer.c) as a bounded test: N inputs from
   a seeded generator -- random bytes, valid frames of every kind cut short at every length,
   and valid frames with bytes flipped or lengths rewritten.

     agent_frame_fuzz [--runs N] [--seed S] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern unsigned long agent_frame_fuzz_frames, agent_frame_fuzz_refused;

static uint64_t state;
static uint64_t next_random(void) { /* splitmix64 */
  uint64_t z = (state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* A few valid frames the agent receives or sends, packed with their length. */
static uint8_t* sample_frame(int kind, size_t* len) {
  static uint8_t nonce[32] = {1, 2, 3};
  static char entry[] = "kernel";
  static char name[] = "y";
  static int64_t shape[] = {4, 8};
  Kiln__V1__AgentFrame f;
  kiln__v1__agent_frame__init(&f);
  Kiln__V1__Challenge challenge = KILN__V1__CHALLENGE__INIT;
  Kiln__V1__Welcome welcome = KILN__V1__WELCOME__INIT;
  Kiln__V1__Heartbeat beat = KILN__V1__HEARTBEAT__INIT;
  Kiln__V1__MeasureJob job = KILN__V1__MEASURE_JOB__INIT;
  Kiln__V1__JobArgument arg = KILN__V1__JOB_ARGUMENT__INIT;
  Kiln__V1__JobArgument* args[1] = {&arg};
  Kiln__V1__MeasureSettings settings = KILN__V1__MEASURE_SETTINGS__INIT;
  Kiln__V1__Refusal refusal = KILN__V1__REFUSAL__INIT;
  switch (kind % 5) {
    case 0:
      challenge.protocol_version = KILN__V1__AGENT_PROTOCOL__AGENT_PROTOCOL_VERSION;
      challenge.nonce.data = nonce;
      challenge.nonce.len = sizeof nonce;
      f.kind_case = KILN__V1__AGENT_FRAME__KIND_CHALLENGE;
      f.challenge = &challenge;
      break;
    case 1:
      welcome.mac.data = nonce;
      welcome.mac.len = sizeof nonce;
      welcome.heartbeat_ms = 2000;
      f.kind_case = KILN__V1__AGENT_FRAME__KIND_WELCOME;
      f.welcome = &welcome;
      break;
    case 2:
      beat.sequence = 7;
      f.kind_case = KILN__V1__AGENT_FRAME__KIND_HEARTBEAT;
      f.heartbeat = &beat;
      break;
    case 3:
      arg.name = name;
      arg.is_buffer = 1;
      arg.type = KILN__V1__ELEMENT_TYPE__ELEMENT_F32;
      arg.n_shape = 2;
      arg.shape = shape;
      arg.output = 1;
      settings.repeat = 3;
      settings.time_limit_ms = 1000;
      job.job_id = 42;
      job.artifact.data = nonce;
      job.artifact.len = sizeof nonce;
      job.entry = entry;
      job.n_arguments = 1;
      job.arguments = args;
      job.settings = &settings;
      f.kind_case = KILN__V1__AGENT_FRAME__KIND_JOB;
      f.job = &job;
      break;
    default:
      refusal.reason = entry;
      f.kind_case = KILN__V1__AGENT_FRAME__KIND_REFUSAL;
      f.refusal = &refusal;
  }
  return frame_pack(&f, len);
}

int main(int argc, char** argv) {
  long runs = 20000;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = strtol(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: agent_frame_fuzz [--runs N] [--seed S]\n");
      return 2;
    }
  }
  state = seed;
  uint8_t input[4096];
  for (long run = 0; run < runs; ++run) {
    size_t n = 0;
    input[n++] = (uint8_t)next_random(); /* how the bytes are cut */
    /* Up to three frames in a row, each whole, cut short, mutated, or random bytes. */
    int pieces = 1 + (int)(next_random() % 3);
    for (int p = 0; p < pieces; ++p) {
      size_t len = 0;
      uint8_t* frame = sample_frame((int)(next_random() % 5), &len);
      if (!frame) return 1;
      switch (next_random() % 4) {
        case 0: /* random bytes */
          len = next_random() % 64;
          if (n + len > sizeof input) len = sizeof input - n;
          for (size_t k = 0; k < len; ++k) input[n + k] = (uint8_t)next_random();
          n += len;
          free(frame);
          continue;
        case 1: /* cut short */
          len = next_random() % (len + 1);
          break;
        case 2: /* bytes flipped */
          for (int k = 0; k < 3; ++k)
            frame[next_random() % len] ^= (uint8_t)(1 + next_random() % 255);
          break;
        default: /* a length rewritten */
          frame[next_random() % 4] = (uint8_t)next_random();
      }
      if (n + len > sizeof input) len = sizeof input - n;
      memcpy(input + n, frame, len);
      n += len;
      free(frame);
    }
    LLVMFuzzerTestOneInput(input, n);
  }
  printf(
      "agent_frame_fuzz: %ld inputs (seed %llu): %lu whole frames decoded and packed back, "
      "%lu connections refused\n",
      runs, (unsigned long long)seed, agent_frame_fuzz_frames, agent_frame_fuzz_refused);
  /* The generator must reach both sides of the decoder, or the test proves nothing. */
  if (agent_frame_fuzz_frames < (unsigned long)runs / 10 ||
      agent_frame_fuzz_refused < (unsigned long)runs / 10) {
    fprintf(stderr, "agent_frame_fuzz: too few inputs reached one side of the decoder\n");
    return 1;
  }
  return 0;
}

// The FMA peak probe (fma_peak.h): each thread runs a loop of independent fused multiply-adds
// on as many vector registers as keep the FMA units busy (latency 4, two units: 8 in flight at
// least), compiled for its width with GCC's target attribute, so one binary probes whichever
// the host has.
#include "fma_peak.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace kiln::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Each probe runs `rounds` rounds of `kInner` steps and returns the FLOPs it did; the
// accumulators' values are folded into *sink so the loop cannot be dropped. acc = acc * m + a
// with m just below 1 stays finite and normal.
constexpr int kInner = 256;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) double probe_avx512(long rounds, float* sink) {
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(1.0f + static_cast<float>(i) * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.9999999f), a = _mm512_set1_ps(1e-7f);
  for (long r = 0; r < rounds; ++r)
    for (int k = 0; k < kInner; ++k)
#pragma GCC unroll 16
      for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  float lanes[16];  // not _mm512_reduce_add_ps, which GCC 12 warns about wrongly
  _mm512_storeu_ps(lanes, s);
  for (float l : lanes) *sink += l;
  return 2.0 * 16 * kAcc * kInner * static_cast<double>(rounds);
}

__attribute__((target("avx2,fma"))) double probe_avx2(long rounds, float* sink) {
  constexpr int kAcc = 12;  // of 16 ymm registers: the constants need two
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(1.0f + static_cast<float>(i) * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
  for (long r = 0; r < rounds; ++r)
    for (int k = 0; k < kInner; ++k)
#pragma GCC unroll 12
      for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  __m256 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm256_add_ps(s, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  for (float l : lanes) *sink += l;
  return 2.0 * 8 * kAcc * kInner * static_cast<double>(rounds);
}
#endif

#if defined(__aarch64__)
double probe_neon(long rounds, float* sink) {
  constexpr int kAcc = 24;
  float32x4_t acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = vdupq_n_f32(1.0f + static_cast<float>(i) * 1e-3f);
  const float32x4_t m = vdupq_n_f32(0.9999999f), a = vdupq_n_f32(1e-7f);
  for (long r = 0; r < rounds; ++r)
    for (int k = 0; k < kInner; ++k)
      for (int i = 0; i < kAcc; ++i) acc[i] = vfmaq_f32(a, acc[i], m);
  for (int i = 0; i < kAcc; ++i) *sink += vaddvq_f32(acc[i]);
  return 2.0 * 4 * kAcc * kInner * static_cast<double>(rounds);
}
#endif

double probe_scalar(long rounds, float* sink) {
  constexpr int kAcc = 8;
  float acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = 1.0f + static_cast<float>(i) * 1e-3f;
  for (long r = 0; r < rounds; ++r)
    for (int k = 0; k < kInner; ++k)
      for (int i = 0; i < kAcc; ++i) acc[i] = __builtin_fmaf(acc[i], 0.9999999f, 1e-7f);
  for (float v : acc) *sink += v;
  return 2.0 * kAcc * kInner * static_cast<double>(rounds);
}

double probe(FmaWidth w, long rounds, float* sink) {
  switch (w) {
#if defined(__x86_64__)
    case FmaWidth::Avx512:
      return probe_avx512(rounds, sink);
    case FmaWidth::Avx2:
      return probe_avx2(rounds, sink);
#endif
#if defined(__aarch64__)
    case FmaWidth::Neon:
      return probe_neon(rounds, sink);
#endif
    default:
      return probe_scalar(rounds, sink);
  }
}

const char* describe(FmaWidth w) {
  switch (w) {
    case FmaWidth::Avx512:
      return "avx512f, 16 zmm accumulators";
    case FmaWidth::Avx2:
      return "avx2+fma, 12 ymm accumulators";
    case FmaWidth::Neon:
      return "neon, 24 q accumulators";
    case FmaWidth::Scalar:
      return "scalar fma, 8 accumulators";
  }
  return "?";
}

}  // namespace

FmaWidth fma_width(bool avx512, bool avx2fma) {
#if defined(__x86_64__)
  if (avx512 && __builtin_cpu_supports("avx512f")) return FmaWidth::Avx512;
  if (avx2fma && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return FmaWidth::Avx2;
  return FmaWidth::Scalar;
#elif defined(__aarch64__)
  (void)avx512;
  (void)avx2fma;
  return FmaWidth::Neon;
#else
  (void)avx512;
  (void)avx2fma;
  return FmaWidth::Scalar;
#endif
}

const FmaPeak& fma_peak(FmaWidth width, int threads, int ms) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, FmaPeak> cache;
  std::lock_guard<std::mutex> lock(mu);
  threads = std::max(threads, 1);
  auto key = std::make_pair(static_cast<int>(width), threads);
  if (auto it = cache.find(key); it != cache.end()) return it->second;

  // Rounds for about `ms` on one thread, from a short calibration run.
  float sink = 0;
  long rounds = 64;
  for (;;) {
    auto start = Clock::now();
    probe(width, rounds, &sink);
    double took = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (took > 10 || rounds > (1L << 40)) {
      rounds = static_cast<long>(static_cast<double>(rounds) * ms / std::max(took, 1e-3));
      break;
    }
    rounds *= 4;
  }
  // Every thread at once, timed from a common start to the last one's end; the best of three.
  double best = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<double> flops(static_cast<size_t>(threads));
    std::vector<float> sinks(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        ++ready;
        while (!go.load()) std::this_thread::yield();
        flops[static_cast<size_t>(t)] = probe(width, rounds, &sinks[static_cast<size_t>(t)]);
      });
    while (ready.load() < threads) std::this_thread::yield();
    auto start = Clock::now();
    go = true;
    for (std::thread& t : pool) t.join();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    double total = 0;
    for (size_t t = 0; t < flops.size(); ++t) {
      total += flops[t];
      sink += sinks[t];
    }
    best = std::max(best, total / seconds * 1e-9);
  }
  FmaPeak& p = cache[key];
  p.gflops = best;
  p.probe = fmt::format("{}, {} thread{}{}", describe(width), threads, threads == 1 ? "" : "s",
                        sink == 12345.f ? " " : "");  // sink read: the loops are kept
  return p;
}

}  // namespace kiln::bench

// The host's FMA peak, measured: what every benchmark line compares its GFLOP/s with, so that a
// figure says how much of this machine it used (machines of one kind differ: AVX-512 or not).
#pragma once

#include <string>

namespace kiln::bench {

// Which FMA loop to run: the widest vectors a target's code may use and the host runs.
enum class FmaWidth { Avx512, Avx2, Neon, Scalar };

// What the probe measured for `threads` threads at once: the single-precision GFLOP/s of a loop
// of independent FMAs (enough accumulators to keep every FMA unit busy), and how it ran.
struct FmaPeak {
  double gflops = 0;
  std::string probe;  // "avx512f, 16 zmm accumulators, 2 threads"
};

// The widest FmaWidth the host supports and `avx512` / `avx2fma` allow (what the target has).
FmaWidth fma_width(bool avx512, bool avx2fma);

// Runs the probe for about `ms` milliseconds on `threads` threads; cached by width and threads.
const FmaPeak& fma_peak(FmaWidth width, int threads, int ms = 150);

}  // namespace kiln::bench

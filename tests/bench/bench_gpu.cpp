// GPU benchmark: kiln's GPU kernels (examples/gpu/*.kiln with their own schedules) against the
// vendor libraries on the same device, in the same run: matmul and batch matmul against cuBLAS
// (cublasSgemm, cublasSgemmStridedBatched, plain FP32: no TF32), the tensor-core matmul
// (matmul_tf32.kiln) against cuBLAS's TF32 GEMM (cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_TF32),
// conv2d against cuDNN's convolution forward (the algorithm cuDNN's heuristics pick first). One
// JSON line per case.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include "bench_support.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/frontend.h"
#include "kiln/interp.h"

namespace kiln::bench {
namespace {

const char* kUsage =
    "usage: bench_gpu [--quick] [--sizes 1024,2048,4096] [--repeat R] [--set KNOB=INT]...\n"
    "                 [--case TEXT]\n"
    "\n"
    "Times kiln's GPU kernels (examples/gpu/matmul.kiln, matmul_tf32.kiln, batch_matmul.kiln,\n"
    "conv2d.kiln, each"
    "with its own schedule, compiled by NVRTC for this GPU) and cuBLAS / cuDNN on the same\n"
    "device and inputs, and prints one JSON line per case:\n"
    "  {\"bench\":\"gpu_matmul_2048\", \"gpu\":..., \"arch\":\"sm_90\", \"kiln_gflops\":...,\n"
    "   \"baseline\":\"cublas\", \"baseline_gflops\":..., \"ratio\":..., \"max_rel_error\":...}\n"
    "Each side runs once to warm up, then R times (CUDA events); the median counts. cuBLAS\n"
    "runs in plain FP32 (no TF32 tensor cores), as kiln's kernels do, except for the gpu_tf32\n"
    "cases, where both sides use TF32 tensor cores. Without a GPU it says so and exits 0. Exit\n"
    "status 1 when a case fails or differs by more than 1e-3 (1e-2 for TF32).\n"
    "\n"
    "  --quick         the smallest size only\n"
    "  --sizes LIST    matmul sizes M = N = K (default 1024,2048,4096)\n"
    "  --repeat R      timed runs (default 20)\n"
    "  --set KNOB=INT  a schedule knob, for every kernel that has it\n"
    "  --case TEXT     only cases whose name contains TEXT\n";

#define CUDA_OK(call)                                                               \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)
#define CUBLAS_OK(call)                                                                       \
  do {                                                                                        \
    cublasStatus_t s_ = (call);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                          \
      throw std::runtime_error(std::string(#call) + ": cuBLAS status " + std::to_string(s_)); \
  } while (0)
#define CUDNN_OK(call)                                                               \
  do {                                                                               \
    cudnnStatus_t s_ = (call);                                                       \
    if (s_ != CUDNN_STATUS_SUCCESS)                                                  \
      throw std::runtime_error(std::string(#call) + ": " + cudnnGetErrorString(s_)); \
  } while (0)

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A device array and its host copy.
struct DeviceArray {
  float* d = nullptr;
  size_t n = 0;
  explicit DeviceArray(const HostBuffer& h) : n(static_cast<size_t>(h.size())) {
    CUDA_OK(cudaMalloc(&d, n * sizeof(float)));
    CUDA_OK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  explicit DeviceArray(size_t count) : n(count) { CUDA_OK(cudaMalloc(&d, n * sizeof(float))); }
  ~DeviceArray() { cudaFree(d); }
  std::vector<float> host() const {
    std::vector<float> h(n);
    CUDA_OK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
};

// Median milliseconds of `repeat` runs of fn after one warm-up, with CUDA events.
double time_ms(const std::function<void()>& fn, int repeat) {
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  fn();
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int r = 0; r < repeat; ++r) {
    CUDA_OK(cudaEventRecord(start));
    fn();
    CUDA_OK(cudaEventRecord(stop));
    CUDA_OK(cudaEventSynchronize(stop));
    float t = 0;
    CUDA_OK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(ms);
}

struct GpuKernel {
  ir::Func func;
  cuda::Program program;
  cuda::Binary binary;
  double compile_ms = 0;
};

GpuKernel compile_gpu(const std::string& file, const ir::Overrides& sizes,
                      const ir::Overrides& knobs, const std::string& arch) {
  auto start = std::chrono::steady_clock::now();
  ir::Module m = frontend::parse_module(read_file(file), file);
  ir::Func f = m.funcs.at(0);
  ir::Overrides set = sizes;
  for (const auto& [k, v] : knobs)
    if (std::any_of(f.knobs.begin(), f.knobs.end(), [&](const ir::Knob& n) { return n.name == k; }))
      set[k] = v;
  CompileRequest r{.func = f, .overrides = set};
  r.options.target = Target{cuda::kTriple, arch, ""};
  r.output = CompileOutput::Cuda;
  CompileResult c = compile(r);
  GpuKernel k{c.func, *c.cuda, {}, 0};
  k.binary = cuda::compile(k.program, arch);
  k.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return k;
}

double max_rel(const HostBuffer& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(got.get_f(static_cast<int64_t>(i)) - ref[i]));
    den = std::max(den, static_cast<double>(std::abs(ref[i])));
  }
  return den == 0 ? num : num / den;
}

void print(const std::string& bench, cuda::Device& gpu, const std::string& baseline, double gflop,
           double kiln_ms, double base_ms, double err, double compile_ms, int repeat,
           const std::string& kernel_name) {
  JsonObject line;
  line.str("bench", bench).str("gpu", gpu.name()).str("arch", gpu.arch());
  line.num("kiln_gflops", gflop / kiln_ms * 1e3, 4).str("baseline", baseline);
  line.num("baseline_gflops", gflop / base_ms * 1e3, 4);
  line.num("ratio", base_ms / kiln_ms, 3).num("max_rel_error", err, 3);
  line.integer("repeat", repeat).num("kiln_ms", kiln_ms, 4).num("baseline_ms", base_ms, 4);
  line.num("compile_ms", compile_ms, 4).str("kernel", kernel_name);
  std::printf("%s\n", line.done().c_str());
  std::fflush(stdout);
}

void error_line(const std::string& bench, const std::string& what) {
  JsonObject line;
  line.str("bench", bench).str("error", what);
  std::printf("%s\n", line.done().c_str());
  std::fflush(stdout);
}

std::string example(const std::string& name) {
  return std::string(KILN_SOURCE_DIR) + "/examples/gpu/" + name + ".kiln";
}

int run(const Options& opts) {
  std::string why;
  if (!cuda::nvrtc_available(&why) || !cuda::gpu_available(&why)) {
    std::fprintf(stderr, "bench_gpu: skipped: %s\n", why.c_str());
    return 0;
  }
  cuda::Device gpu;
  int repeat = opts.repeat > 0 ? opts.repeat : 20;
  std::vector<int64_t> sizes =
      opts.sizes.empty() ? std::vector<int64_t>{1024, 2048, 4096} : opts.sizes;
  if (opts.quick) sizes = {sizes.front()};
  cublasHandle_t blas;
  CUBLAS_OK(cublasCreate(&blas));
  CUBLAS_OK(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH));
  bool ok = true;
  auto wanted = [&](const std::string& name) {
    return opts.filter.empty() || name.find(opts.filter) != std::string::npos;
  };
  auto check = [&](const std::string& name, double err, double within = 1e-3) {
    if (err > within) {
      std::fprintf(stderr, "bench_gpu: %s: kiln's result differs from the baseline's (%g)\n",
                   name.c_str(), err);
      ok = false;
    }
  };

  // C = A B, n x n x n, by an example and by cuBLAS's `gemm` (row-major C = A B is column-major
  // C^T = B^T A^T): the JSON line, or an error line.
  using Gemm =
      std::function<void(const DeviceArray& A, const DeviceArray& B, DeviceArray& C, int n)>;
  auto square_matmul = [&](const std::string& name, const std::string& file, int64_t n,
                           const std::string& baseline, double within, const Gemm& gemm) {
    if (!wanted(name)) return;
    std::fprintf(stderr, "bench_gpu: %s (%d timed runs)\n", name.c_str(), repeat);
    try {
      GpuKernel k =
          compile_gpu(example(file), {{"M", n}, {"N", n}, {"K", n}}, opts.knobs, gpu.arch());
      Bindings b = interp::random_bindings(k.func, interp::param_values(k.func), 1);
      cuda::Device::Timing t = gpu.run(k.program, k.binary, b, repeat);
      DeviceArray A(b.buffers.at("A")), B(b.buffers.at("B")), C(static_cast<size_t>(n * n));
      double base = time_ms([&] { gemm(A, B, C, static_cast<int>(n)); }, repeat);
      double err = max_rel(b.buffers.at("C"), C.host());
      check(name, err, within);
      print(name, gpu, baseline, 2.0 * n * n * n * 1e-9, median(t.ms), base, err, k.compile_ms,
            repeat, "examples/gpu/" + file + ".kiln");
    } catch (const std::exception& e) {
      error_line(name, e.what());
      ok = false;
    }
  };
  const float one = 1, zero = 0;
  for (int64_t n : sizes)
    square_matmul("gpu_matmul_" + std::to_string(n), "matmul", n, "cublas", 1e-3,
                  [&](const DeviceArray& A, const DeviceArray& B, DeviceArray& C, int N) {
                    CUBLAS_OK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, B.d, N,
                                          A.d, N, &zero, C.d, N));
                  });
  // TF32 tensor cores on both sides: cuBLAS on a handle of its own, in its default math mode.
  cublasHandle_t blas_tf32;
  CUBLAS_OK(cublasCreate(&blas_tf32));
  for (int64_t n : sizes)
    square_matmul(
        "gpu_tf32_matmul_" + std::to_string(n), "matmul_tf32", n, "cublas_tf32", 1e-2,
        [&](const DeviceArray& A, const DeviceArray& B, DeviceArray& C, int N) {
          CUBLAS_OK(cublasGemmEx(blas_tf32, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, B.d,
                                 CUDA_R_32F, N, A.d, CUDA_R_32F, N, &zero, C.d, CUDA_R_32F, N,
                                 CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
        });
  cublasDestroy(blas_tf32);

  {
    int64_t batch = 32, n = opts.quick ? 256 : 512;
    std::string name = "gpu_batch_matmul_" + std::to_string(batch) + "x" + std::to_string(n);
    if (wanted(name)) try {
        std::fprintf(stderr, "bench_gpu: %s (%d timed runs)\n", name.c_str(), repeat);
        GpuKernel k =
            compile_gpu(example("batch_matmul"), {{"BATCH", batch}, {"M", n}, {"N", n}, {"K", n}},
                        opts.knobs, gpu.arch());
        Bindings b = interp::random_bindings(k.func, interp::param_values(k.func), 2);
        cuda::Device::Timing t = gpu.run(k.program, k.binary, b, repeat);
        DeviceArray A(b.buffers.at("A")), B(b.buffers.at("B")),
            C(static_cast<size_t>(batch * n * n));
        int N = static_cast<int>(n);
        long long stride = n * n;
        double base = time_ms(
            [&] {
              CUBLAS_OK(cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one,
                                                  B.d, N, stride, A.d, N, stride, &zero, C.d, N,
                                                  stride, static_cast<int>(batch)));
            },
            repeat);
        double err = max_rel(b.buffers.at("C"), C.host());
        check(name, err);
        print(name, gpu, "cublas", 2.0 * batch * n * n * n * 1e-9, median(t.ms), base, err,
              k.compile_ms, repeat, "examples/gpu/batch_matmul.kiln");
      } catch (const std::exception& e) {
        error_line(name, e.what());
        ok = false;
      }
  }

  struct ConvShape {
    int64_t n, c, h, w, f, kh, kw, p;
  };
  std::vector<ConvShape> shapes = {{1, 64, 56, 56, 64, 3, 3, 1}, {32, 64, 56, 56, 64, 3, 3, 1}};
  if (opts.quick) shapes.resize(1);
  cudnnHandle_t dnn;
  CUDNN_OK(cudnnCreate(&dnn));
  for (const ConvShape& s : shapes) {
    std::string name = "gpu_conv_" + std::to_string(s.n) + "x" + std::to_string(s.c) + "x" +
                       std::to_string(s.h) + "x" + std::to_string(s.w) + "_" + std::to_string(s.f) +
                       "x" + std::to_string(s.kh) + "x" + std::to_string(s.kw) + "_p" +
                       std::to_string(s.p);
    if (!wanted(name)) continue;
    std::fprintf(stderr, "bench_gpu: %s (%d timed runs)\n", name.c_str(), repeat);
    try {
      GpuKernel k = compile_gpu(example("conv2d"),
                                {{"N", s.n},
                                 {"C", s.c},
                                 {"H", s.h},
                                 {"W", s.w},
                                 {"F", s.f},
                                 {"KH", s.kh},
                                 {"KW", s.kw},
                                 {"P", s.p}},
                                opts.knobs, gpu.arch());
      Bindings b = interp::random_bindings(k.func, interp::param_values(k.func), 3);
      cuda::Device::Timing t = gpu.run(k.program, k.binary, b, repeat);
      int64_t oh = s.h + 2 * s.p - s.kh + 1, ow = s.w + 2 * s.p - s.kw + 1;
      DeviceArray I(b.buffers.at("I")), W(b.buffers.at("Wt")),
          O(static_cast<size_t>(s.n * s.f * oh * ow));
      cudnnTensorDescriptor_t xd, yd;
      cudnnFilterDescriptor_t wd;
      cudnnConvolutionDescriptor_t cd;
      CUDNN_OK(cudnnCreateTensorDescriptor(&xd));
      CUDNN_OK(cudnnCreateTensorDescriptor(&yd));
      CUDNN_OK(cudnnCreateFilterDescriptor(&wd));
      CUDNN_OK(cudnnCreateConvolutionDescriptor(&cd));
      CUDNN_OK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)s.n,
                                          (int)s.c, (int)s.h, (int)s.w));
      CUDNN_OK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)s.f,
                                          (int)s.c, (int)s.kh, (int)s.kw));
      CUDNN_OK(cudnnSetConvolution2dDescriptor(cd, (int)s.p, (int)s.p, 1, 1, 1, 1,
                                               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      CUDNN_OK(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
      CUDNN_OK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)s.n,
                                          (int)s.f, (int)oh, (int)ow));
      cudnnConvolutionFwdAlgoPerf_t perf[8];
      int found = 0;
      CUDNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(dnn, xd, wd, cd, yd, 8, &found, perf));
      cudnnConvolutionFwdAlgo_t algo = perf[0].algo;
      for (int i = 0; i < found; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH) {
          algo = perf[i].algo;
          break;
        }
      size_t ws = 0;
      CUDNN_OK(cudnnGetConvolutionForwardWorkspaceSize(dnn, xd, wd, cd, yd, algo, &ws));
      DeviceArray work(ws / sizeof(float) + 1);
      double base = time_ms(
          [&] {
            CUDNN_OK(cudnnConvolutionForward(dnn, &one, xd, I.d, wd, W.d, cd, algo, work.d, ws,
                                             &zero, yd, O.d));
          },
          repeat);
      double err = max_rel(b.buffers.at("O"), O.host());
      check(name, err);
      double gflop = 2.0 * s.n * s.f * oh * ow * s.c * s.kh * s.kw * 1e-9;
      print(name, gpu, "cudnn", gflop, median(t.ms), base, err, k.compile_ms, repeat,
            "examples/gpu/conv2d.kiln");
      cudnnDestroyTensorDescriptor(xd);
      cudnnDestroyTensorDescriptor(yd);
      cudnnDestroyFilterDescriptor(wd);
      cudnnDestroyConvolutionDescriptor(cd);
    } catch (const std::exception& e) {
      error_line(name, e.what());
      ok = false;
    }
  }
  cudnnDestroy(dnn);
  cublasDestroy(blas);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  kiln::bench::Options opts = kiln::bench::parse_options(argc, argv, kiln::bench::kUsage);
  return kiln::bench::run(opts);
}

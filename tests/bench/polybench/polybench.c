// The PolyBench kernels of tests/bench/polybench/*.kiln in plain C, LARGE, f64, with each
// loop nest in PolyBench 4.2's order: the baseline the auto-scheduling benchmark compiles
// with gcc -O3 -march=native and with clang -O3 -march=native -mllvm -polly
// (tests/bench/bench_polybench.py). Usage: polybench KERNEL [REPS]; prints one JSON line,
// {"kernel":"gemm","ms":...,"checksum":...}, ms the fastest of REPS runs (default 3), each
// run on freshly initialized arrays.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Deterministic values in [0, 1) for element `k` of an array seeded `s`.
static double value(long k, long s) { return (double)((k * 7 + s * 13) % 1009) / 1009.0; }

static void fill(double* a, long n, long s) {
  for (long k = 0; k < n; ++k) a[k] = value(k, s);
}

static double sum(const double* a, long n) {
  double s = 0;
  for (long k = 0; k < n; ++k) s += a[k];
  return s;
}

#define GEMM_NI 1000
#define GEMM_NJ 1100
#define GEMM_NK 1200
static void gemm(double C[GEMM_NI][GEMM_NJ], double A[GEMM_NI][GEMM_NK],
                 double B[GEMM_NK][GEMM_NJ]) {
  for (int i = 0; i < GEMM_NI; i++) {
    for (int j = 0; j < GEMM_NJ; j++) C[i][j] *= 1.2;
    for (int k = 0; k < GEMM_NK; k++)
      for (int j = 0; j < GEMM_NJ; j++) C[i][j] += 1.5 * A[i][k] * B[k][j];
  }
}

#define MM_NI 800
#define MM_NJ 900
#define MM_NK 1100
#define MM_NL 1200
static void two_mm(double tmp[MM_NI][MM_NJ], double A[MM_NI][MM_NK], double B[MM_NK][MM_NJ],
                   double C[MM_NJ][MM_NL], double D[MM_NI][MM_NL]) {
  for (int i = 0; i < MM_NI; i++)
    for (int j = 0; j < MM_NJ; j++) {
      tmp[i][j] = 0.0;
      for (int k = 0; k < MM_NK; ++k) tmp[i][j] += 1.5 * A[i][k] * B[k][j];
    }
  for (int i = 0; i < MM_NI; i++)
    for (int l = 0; l < MM_NL; l++) {
      D[i][l] *= 1.2;
      for (int j = 0; j < MM_NJ; ++j) D[i][l] += tmp[i][j] * C[j][l];
    }
}

#define SYRK_N 1200
#define SYRK_M 1000
static void syrk(double C[SYRK_N][SYRK_N], double A[SYRK_N][SYRK_M]) {
  for (int i = 0; i < SYRK_N; i++) {
    for (int j = 0; j <= i; j++) C[i][j] *= 1.2;
    for (int k = 0; k < SYRK_M; k++)
      for (int j = 0; j <= i; j++) C[i][j] += 1.5 * A[i][k] * A[j][k];
  }
}

#define TRMM_M 1000
#define TRMM_N 1200
static void trmm(double A[TRMM_M][TRMM_M], double B[TRMM_M][TRMM_N]) {
  for (int i = 0; i < TRMM_M; i++)
    for (int j = 0; j < TRMM_N; j++) {
      for (int k = i + 1; k < TRMM_M; k++) B[i][j] += A[k][i] * B[k][j];
      B[i][j] = 1.5 * B[i][j];
    }
}

#define COV_M 1200
#define COV_N 1400
static void covariance(double data[COV_N][COV_M], double cov[COV_M][COV_M], double mean[COV_M]) {
  double float_n = COV_N;
  for (int j = 0; j < COV_M; j++) {
    mean[j] = 0.0;
    for (int i = 0; i < COV_N; i++) mean[j] += data[i][j];
    mean[j] /= float_n;
  }
  for (int i = 0; i < COV_N; i++)
    for (int j = 0; j < COV_M; j++) data[i][j] -= mean[j];
  for (int i = 0; i < COV_M; i++)
    for (int j = i; j < COV_M; j++) {
      cov[i][j] = 0.0;
      for (int k = 0; k < COV_N; k++) cov[i][j] += data[k][i] * data[k][j];
      cov[i][j] /= (float_n - 1.0);
      cov[j][i] = cov[i][j];
    }
}

#define ATAX_M 1900
#define ATAX_N 2100
static void atax(double A[ATAX_M][ATAX_N], double x[ATAX_N], double y[ATAX_N], double tmp[ATAX_M]) {
  for (int i = 0; i < ATAX_N; i++) y[i] = 0;
  for (int i = 0; i < ATAX_M; i++) {
    tmp[i] = 0.0;
    for (int j = 0; j < ATAX_N; j++) tmp[i] = tmp[i] + A[i][j] * x[j];
    for (int j = 0; j < ATAX_N; j++) y[j] = y[j] + A[i][j] * tmp[i];
  }
}

#define MVT_N 2000
static void mvt(double x1[MVT_N], double x2[MVT_N], double y1[MVT_N], double y2[MVT_N],
                double A[MVT_N][MVT_N]) {
  for (int i = 0; i < MVT_N; i++)
    for (int j = 0; j < MVT_N; j++) x1[i] = x1[i] + A[i][j] * y1[j];
  for (int i = 0; i < MVT_N; i++)
    for (int j = 0; j < MVT_N; j++) x2[i] = x2[i] + A[j][i] * y2[j];
}

#define JAC_T 500
#define JAC_N 1300
static void jacobi_2d(double A[JAC_N][JAC_N], double B[JAC_N][JAC_N]) {
  for (int t = 0; t < JAC_T; t++) {
    for (int i = 1; i < JAC_N - 1; i++)
      for (int j = 1; j < JAC_N - 1; j++)
        B[i][j] = 0.2 * (A[i][j] + A[i][j - 1] + A[i][1 + j] + A[1 + i][j] + A[i - 1][j]);
    for (int i = 1; i < JAC_N - 1; i++)
      for (int j = 1; j < JAC_N - 1; j++)
        A[i][j] = 0.2 * (B[i][j] + B[i][j - 1] + B[i][1 + j] + B[1 + i][j] + B[i - 1][j]);
  }
}

#define HEAT_T 500
#define HEAT_N 120
static void heat_3d(double A[HEAT_N][HEAT_N][HEAT_N], double B[HEAT_N][HEAT_N][HEAT_N]) {
  for (int t = 1; t <= HEAT_T; t++) {
    for (int i = 1; i < HEAT_N - 1; i++)
      for (int j = 1; j < HEAT_N - 1; j++)
        for (int k = 1; k < HEAT_N - 1; k++)
          B[i][j][k] = 0.125 * (A[i + 1][j][k] - 2.0 * A[i][j][k] + A[i - 1][j][k]) +
                       0.125 * (A[i][j + 1][k] - 2.0 * A[i][j][k] + A[i][j - 1][k]) +
                       0.125 * (A[i][j][k + 1] - 2.0 * A[i][j][k] + A[i][j][k - 1]) + A[i][j][k];
    for (int i = 1; i < HEAT_N - 1; i++)
      for (int j = 1; j < HEAT_N - 1; j++)
        for (int k = 1; k < HEAT_N - 1; k++)
          A[i][j][k] = 0.125 * (B[i + 1][j][k] - 2.0 * B[i][j][k] + B[i - 1][j][k]) +
                       0.125 * (B[i][j + 1][k] - 2.0 * B[i][j][k] + B[i][j - 1][k]) +
                       0.125 * (B[i][j][k + 1] - 2.0 * B[i][j][k] + B[i][j][k - 1]) + B[i][j][k];
  }
}

// Up to five arrays a kernel uses, and how many elements each has.
struct arrays {
  double* a[5];
  long n[5];
};

static void run(const char* name, struct arrays* m) {
  double** a = m->a;
  if (!strcmp(name, "gemm"))
    gemm((void*)a[0], (void*)a[1], (void*)a[2]);
  else if (!strcmp(name, "2mm"))
    two_mm((void*)a[0], (void*)a[1], (void*)a[2], (void*)a[3], (void*)a[4]);
  else if (!strcmp(name, "syrk"))
    syrk((void*)a[0], (void*)a[1]);
  else if (!strcmp(name, "trmm"))
    trmm((void*)a[0], (void*)a[1]);
  else if (!strcmp(name, "covariance"))
    covariance((void*)a[0], (void*)a[1], a[2]);
  else if (!strcmp(name, "atax"))
    atax((void*)a[0], a[1], a[2], a[3]);
  else if (!strcmp(name, "mvt"))
    mvt(a[0], a[1], a[2], a[3], (void*)a[4]);
  else if (!strcmp(name, "jacobi-2d"))
    jacobi_2d((void*)a[0], (void*)a[1]);
  else if (!strcmp(name, "heat-3d"))
    heat_3d((void*)a[0], (void*)a[1]);
}

static int sizes(const char* name, struct arrays* m) {
  static const struct {
    const char* name;
    long n[5];
  } table[] = {
      {"gemm", {GEMM_NI * GEMM_NJ, GEMM_NI * GEMM_NK, GEMM_NK * GEMM_NJ}},
      {"2mm", {MM_NI * MM_NJ, MM_NI * MM_NK, MM_NK * MM_NJ, MM_NJ * MM_NL, MM_NI * MM_NL}},
      {"syrk", {SYRK_N * SYRK_N, SYRK_N * SYRK_M}},
      {"trmm", {TRMM_M * TRMM_M, TRMM_M * TRMM_N}},
      {"covariance", {COV_N * COV_M, COV_M * COV_M, COV_M}},
      {"atax", {ATAX_M * ATAX_N, ATAX_N, ATAX_N, ATAX_M}},
      {"mvt", {MVT_N, MVT_N, MVT_N, MVT_N, MVT_N * MVT_N}},
      {"jacobi-2d", {JAC_N * JAC_N, JAC_N * JAC_N}},
      {"heat-3d", {HEAT_N * HEAT_N * HEAT_N, HEAT_N * HEAT_N * HEAT_N}},
  };
  for (size_t k = 0; k < sizeof table / sizeof table[0]; ++k) {
    if (strcmp(name, table[k].name)) continue;
    for (int i = 0; i < 5; ++i) {
      m->n[i] = table[k].n[i];
      m->a[i] = m->n[i] ? aligned_alloc(64, (m->n[i] * sizeof(double) + 63) / 64 * 64) : NULL;
    }
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: polybench KERNEL [REPS]\n");
    return 2;
  }
  const char* name = argv[1];
  int reps = argc > 2 ? atoi(argv[2]) : 3;
  struct arrays m;
  if (!sizes(name, &m)) {
    fprintf(stderr,
            "polybench: no kernel '%s' (gemm, 2mm, syrk, trmm, covariance, atax, mvt, "
            "jacobi-2d, heat-3d)\n",
            name);
    return 2;
  }
  double best = 1e300, checksum = 0;
  for (int r = 0; r < reps; ++r) {
    for (int i = 0; i < 5; ++i)
      if (m.a[i]) fill(m.a[i], m.n[i], i);
    double start = now_ms();
    run(name, &m);
    double ms = now_ms() - start;
    if (ms < best) best = ms;
    checksum = 0;
    for (int i = 0; i < 5; ++i)
      if (m.a[i]) checksum += sum(m.a[i], m.n[i]);
  }
  printf("{\"kernel\":\"%s\",\"ms\":%.4f,\"checksum\":%.6g}\n", name, best, checksum);
  return 0;
}

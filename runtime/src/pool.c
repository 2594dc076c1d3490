/* The thread pool behind kiln_parallel_launch: workers created once, woken per launch, each
   working through its own share of the iterations in chunks and then taking chunks of the shares
   not yet done (pinned only when asked). */
#define _GNU_SOURCE

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/runtime.h"
#include "topology.h"

/* How long a waiting thread spins before it sleeps, unless KILN_SPIN_US says otherwise: long
   enough to bridge the launches of one kernel and the serial work between them (a copy, an
   allocation), which a sleeping worker misses while it wakes (on this project's virtual
   machines a wake took long enough that the launcher did most of a convolution's work alone:
   with 50 us, two threads ran it at 1.0-1.5x one; with 1 ms, 1.8x), and about what libgomp
   spins by default. A pool with more threads than the CPUs it may use does not spin at all:
   there a spinning thread only keeps the one it waits for off the CPU. */
#define KILN_SPIN_NS 1000000u

/* KILN_SPIN_US from the environment, in nanoseconds, or the default. */
static uint64_t spin_budget_ns(void) {
  const char* text = getenv("KILN_SPIN_US");
  if (text == NULL || *text == '\0') return KILN_SPIN_NS;
  char* end = NULL;
  unsigned long long us = strtoull(text, &end, 10);
  if (*end != '\0' || text[0] == '-' || us > 10000000ull) return KILN_SPIN_NS; /* at most 10 s */
  return (uint64_t)us * 1000u;
}

typedef struct kiln_worker {
  pthread_t thread;
  int index;     /* its share of a launch: 1.. (the launching thread's is 0) */
  int cpu;       /* the CPU it is pinned to, or -1 */
  uint64_t seen; /* the generation when it was created */
} kiln_worker;

/* One thread's share of a launch, [next, end): taken from the front, a chunk at a time, by its
   thread and, once their own are done, by the others. On a line of its own. */
typedef struct kiln_share {
  _Alignas(64) _Atomic int64_t next;
  int64_t end;
} kiln_share;

/* One pool per process. A launch or a resize owns it through `busy`; the job fields are written
   by the owner before `generation` is bumped and read by workers after they see the bump, and the
   owner waits for every worker to finish before it writes them again. */
typedef struct kiln_pool {
  _Alignas(64) _Atomic uint64_t generation; /* bumped once per launch; workers wait on it */
  /* The door of the current launch: its generation (high 32 bits), whether it is open (bit 31)
     and the workers inside (the low 31 bits). A worker joins while the door is open; the
     launching thread closes it once every chunk is taken and waits only for those inside, so a
     worker that has not started (asleep, or off its CPU because another process has it) holds
     nothing up, and finds the door closed when it comes. */
  _Alignas(64) _Atomic uint64_t door;
  atomic_int caller_waiting;        /* the launching thread sleeps on `done` */
  _Alignas(64) atomic_int sleepers; /* workers asleep on `wake` */
  atomic_int busy;
  atomic_int ready;    /* 1 once the workers exist */
  atomic_int nthreads; /* workers + 1 */
  atomic_int pinned;
  atomic_int epoch; /* bumped whenever the workers are replaced */
  int caller_cpu;   /* the CPU a launching thread is pinned to when the pool is pinned, or -1 */
  kiln_task_fn fn;
  void* closure;
  int64_t grain; /* iterations per chunk */
  int stopping;
  uint64_t spin_ns;
  /* Contention (contended): until contended_until_ns the pool's threads do not spin and its
     launches run on the launching thread alone; backoff_ns is how long the next sign of
     contention sends it there, and clean counts the parallel launches since the last one. */
  _Atomic uint64_t contended_until_ns;
  _Atomic uint64_t backoff_ns;
  atomic_int clean;
  uint64_t next_look_ns; /* when a contended launch looks at the host's runnable threads next */
  /* What kiln_runtime_pool_stats reports. */
  _Atomic uint64_t parallel_launches, alone_launches, contended_marks, spins, spins_cut;
  int cpus;   /* the CPUs the pool may use */
  int yields; /* whether contention may send launches to the launching thread alone */
  kiln_worker* workers;
  kiln_share* shares; /* one per thread */
  pthread_mutex_t mutex;
  pthread_cond_t wake;
  pthread_cond_t done;
} kiln_pool;

static kiln_pool g_pool = {
    .nthreads = 1,
    .caller_cpu = -1,
    .mutex = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};

/* Serializes creating and replacing the workers, and fork against both. */
static pthread_mutex_t g_setup = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_fork_handlers = PTHREAD_ONCE_INIT;

/* Set on workers for their whole life and on a launching thread while it runs its own chunk: a
   launch made where it is set runs serially. */
static _Thread_local int t_in_task;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Chunks per thread a launch aims for: enough that a thread slowed down (by another process, an
   interrupt, a slower core) leaves most of its share to the others, few enough that taking one
   costs nothing beside running it. */
#define KILN_CHUNKS_PER_THREAD 8

static int64_t grain_of(int64_t n, int nthreads) {
  int64_t grain = n / ((int64_t)nthreads * KILN_CHUNKS_PER_THREAD);
  return grain > 0 ? grain : 1;
}

/* Splits [0, n) into one contiguous share per thread, the first n % nthreads one larger. The same
   n always gives a thread the same share, so the loops of one kernel that walk the same rows
   (zeroing C, then each step of the reduction) give each row to the thread that touched it last
   and that still holds it in its caches. */
static void share_out(kiln_pool* pool, int64_t n, int nthreads) {
  int64_t size = n / nthreads, larger = n % nthreads, begin = 0;
  for (int t = 0; t < nthreads; t++) {
    int64_t end = begin + size + (t < larger ? 1 : 0);
    atomic_store_explicit(&pool->shares[t].next, begin, memory_order_relaxed);
    pool->shares[t].end = end;
    begin = end;
  }
}

/* Runs chunks of the current launch until none is left: those of the thread's own share first,
   then those of the next shares in turn, from their front, as their threads would. */
static int64_t run_chunks(kiln_pool* pool, int self) {
  int64_t ran = 0;
  int nthreads = atomic_load_explicit(&pool->nthreads, memory_order_relaxed);
  int64_t grain = pool->grain;
  for (int k = 0; k < nthreads; k++) {
    kiln_share* share = &pool->shares[(self + k) % nthreads];
    int64_t end = share->end;
    for (;;) {
      int64_t begin = atomic_fetch_add_explicit(&share->next, grain, memory_order_relaxed);
      if (begin >= end) {
        break;
      }
      pool->fn(begin, end - begin > grain ? begin + grain : end, pool->closure);
      ran++;
    }
  }
  return ran;
}

static void run_serially(kiln_task_fn fn, void* closure, int64_t n) {
  int outer = t_in_task;
  t_in_task = 1;
  fn(0, n, closure);
  t_in_task = outer;
}

/* Contention. On a host with fewer free CPUs than the pool has threads (another process busy
   beside the kernel), a thread of the pool loses its CPU for a time slice, milliseconds, while
   the others wait for it: at the end of a launch for the chunk it holds, or for the CPU a
   spinning thread keeps. Measured on a 2-core host with one busy process beside a 2-thread
   GEMM, that made a 512 GEMM 14x slower than on the quiet host. So a thread that finds it was
   off its CPU for more than KILN_PREEMPT_NS while it ran chunks (its wall time past its CPU
   time, over one launch a KILN_LOOK_NS: watch_launch) or while it spun (the clock jumped between
   two looks), and then finds more threads runnable on the host than the pool's own and the CPUs
   leave room for, marks the pool contended: for the next backoff its launches run on the launching
   thread alone, at one CPU's speed (what the host has to give), with no thread to wait for and none
   spinning. Every KILN_LOOK_NS such a launch looks whether the host has room for the workers again,
   and ends the contention at once when it has (another program's threads that ran a while, and
   stopped). The backoff starts at KILN_BACKOFF_MIN_NS and doubles while the contention goes on,
   up to KILN_BACKOFF_MAX_NS, and is forgotten after KILN_CLEAN_LAUNCHES parallel launches with
   no sign of it. A preemption shorter than KILN_PREEMPT_NS (a kernel thread, an interrupt), or
   one by a thread of the pool itself (new workers spin on their creator's CPU until the
   scheduler moves them), is not contention. */
#define KILN_PREEMPT_NS 500000u
#define KILN_LOOK_NS 1000000u
#define KILN_BACKOFF_MIN_NS 20000000u
#define KILN_BACKOFF_MAX_NS 640000000u
#define KILN_CLEAN_LAUNCHES 256

/* Whether the host has a CPU for each of the pool's `nthreads` threads now, besides the other
   threads runnable on it: those /proc/loadavg counts (its fourth field) less `ours`, the pool's
   threads that may be among them. -1 when it cannot tell. */
static int host_has_room(kiln_pool* pool, int nthreads, int ours) {
  FILE* f = fopen("/proc/loadavg", "re");
  if (f == NULL) {
    return -1;
  }
  double a, b, c;
  int running = 0, total = 0;
  int n = fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total);
  fclose(f);
  if (n != 5 || running < 1) {
    return -1;
  }
  return running - ours <= pool->cpus - nthreads;
}

static void mark_contended(kiln_pool* pool, uint64_t now) {
  if (!pool->yields) {
    return;
  }
  /* Any thread of the pool may be runnable: a worker just woken (still counted among the
     sleepers) runs on its waker's CPU at first, and takes it from the waker for a while. */
  int nthreads = atomic_load_explicit(&pool->nthreads, memory_order_relaxed);
  if (host_has_room(pool, nthreads, nthreads) == 1) {
    return;
  }
  uint64_t backoff = atomic_load_explicit(&pool->backoff_ns, memory_order_relaxed);
  backoff = backoff == 0 ? KILN_BACKOFF_MIN_NS : 2 * backoff;
  if (backoff > KILN_BACKOFF_MAX_NS) {
    backoff = KILN_BACKOFF_MAX_NS;
  }
  atomic_fetch_add_explicit(&pool->contended_marks, 1, memory_order_relaxed);
  atomic_store_explicit(&pool->backoff_ns, backoff, memory_order_relaxed);
  atomic_store_explicit(&pool->clean, 0, memory_order_relaxed);
  atomic_store_explicit(&pool->contended_until_ns, now + backoff, memory_order_relaxed);
}

static int contended(kiln_pool* pool, uint64_t now) {
  return now < atomic_load_explicit(&pool->contended_until_ns, memory_order_relaxed);
}

/* Whether a launch of this thread runs alone because the pool is contended. */
static int run_alone(kiln_pool* pool, uint64_t now, int nthreads) {
  if (!contended(pool, now)) {
    return 0;
  }
  if (now < pool->next_look_ns) {
    return 1;
  }
  pool->next_look_ns = now + KILN_LOOK_NS;
  /* Only this thread of the pool runs now: the workers wait for a launch. */
  if (host_has_room(pool, nthreads, 1) != 1) {
    return 1;
  }
  atomic_store_explicit(&pool->contended_until_ns, 0, memory_order_relaxed);
  return 0;
}

/* A parallel launch with no sign of contention. */
static void note_clean_launch(kiln_pool* pool) {
  if (atomic_load_explicit(&pool->backoff_ns, memory_order_relaxed) != 0 &&
      atomic_fetch_add_explicit(&pool->clean, 1, memory_order_relaxed) + 1 >= KILN_CLEAN_LAUNCHES) {
    atomic_store_explicit(&pool->backoff_ns, 0, memory_order_relaxed);
  }
}

/* This thread's CPU time, in nanoseconds; 0 when the clock cannot be read. */
static uint64_t thread_cpu_ns(void) {
  struct timespec t;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) {
    return 0;
  }
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A thread's CPU clock is a system call (about 0.4 us on this project's VMs), twice a launch
   where a launch may take microseconds: each thread watches at most one launch every
   KILN_LOOK_NS. The CPU time at the start of a launch watched, or 0. */
static _Thread_local uint64_t t_next_watch_ns;

static uint64_t watch_launch(uint64_t now) {
  if (now < t_next_watch_ns) {
    return 0;
  }
  t_next_watch_ns = now + KILN_LOOK_NS;
  return thread_cpu_ns();
}

/* After a thread ran chunks since wall time `wall0` and CPU time `cpu0` (watch_launch's),
   waiting for nothing: whether it was off its CPU for long (then the pool is marked
   contended). */
static int ran_off_cpu(kiln_pool* pool, uint64_t wall0, uint64_t cpu0) {
  if (cpu0 == 0) {
    return 0;
  }
  uint64_t wall = kiln_now_ns(), cpu = thread_cpu_ns();
  if (cpu < cpu0 || wall - wall0 < cpu - cpu0 + KILN_PREEMPT_NS) {
    return 0;
  }
  mark_contended(pool, wall);
  return 1;
}

/* How long a thread may spin now. */
static uint64_t spin_now(kiln_pool* pool, uint64_t now) {
  return contended(pool, now) ? 0 : pool->spin_ns;
}

/* Whether a spinning thread that last looked at the clock at *last was off its CPU since (then
   the pool is marked contended). */
static int preempted(kiln_pool* pool, uint64_t* last, uint64_t now) {
  uint64_t gap = now - *last;
  *last = now;
  if (gap < KILN_PREEMPT_NS) {
    return 0;
  }
  mark_contended(pool, now);
  return 1;
}

/* Spins until the generation moves past `seen`, the spin budget runs out or the thread finds it
   is not getting its CPU; returns what it saw last. */
static uint64_t spin_for_generation(kiln_pool* pool, uint64_t seen) {
  uint64_t start = kiln_now_ns(), last = start, budget = spin_now(pool, start);
  atomic_fetch_add_explicit(&pool->spins, 1, memory_order_relaxed);
  for (unsigned i = 1;; i++) {
    uint64_t generation = atomic_load_explicit(&pool->generation, memory_order_acquire);
    if (generation != seen) {
      return generation;
    }
    if ((i & 63) == 0) {
      uint64_t now = kiln_now_ns();
      if (now - start >= budget) {
        return generation;
      }
      if (preempted(pool, &last, now)) {
        atomic_fetch_add_explicit(&pool->spins_cut, 1, memory_order_relaxed);
        return generation;
      }
    }
    cpu_relax();
  }
}

/* Returns the next generation after `seen`, spinning first, then sleeping. A launcher bumps the
   generation before it reads `sleepers`, and a worker counts itself in `sleepers` before it reads
   the generation (all sequentially consistent), so one of them always sees the other. */
static uint64_t wait_for_launch(kiln_pool* pool, uint64_t seen) {
  uint64_t generation = spin_for_generation(pool, seen);
  if (generation != seen) {
    return generation;
  }
  pthread_mutex_lock(&pool->mutex);
  atomic_fetch_add(&pool->sleepers, 1);
  while ((generation = atomic_load(&pool->generation)) == seen) {
    pthread_cond_wait(&pool->wake, &pool->mutex);
  }
  atomic_fetch_sub(&pool->sleepers, 1);
  pthread_mutex_unlock(&pool->mutex);
  return generation;
}

/* What the launching thread's wait for a worker's last chunk spins beyond twice a chunk's time:
   the worker's wake and the cache lines it writes last. */
#define KILN_CHUNK_SLACK_NS 20000u

#define KILN_DOOR_OPEN (UINT64_C(1) << 31)
#define KILN_DOOR_INSIDE (KILN_DOOR_OPEN - 1)

static uint64_t door_of(uint64_t generation) { return (generation << 32) | KILN_DOOR_OPEN; }

/* Enters the launch of `generation` if its door is still open: 1 when in. */
static int join_launch(kiln_pool* pool, uint64_t generation) {
  uint64_t door = atomic_load(&pool->door);
  for (;;) {
    if ((door >> 32) != (generation & 0xffffffffu) || !(door & KILN_DOOR_OPEN)) {
      return 0;
    }
    if (atomic_compare_exchange_weak(&pool->door, &door, door + 1)) {
      return 1;
    }
  }
}

/* Closes the door once every chunk is taken and waits for the workers inside (each finishing
   the chunk it took), with the same handshake as wait_for_launch. */
static int wait_for_workers(kiln_pool* pool, uint64_t chunk_ns) {
  uint64_t inside = atomic_fetch_and(&pool->door, ~(uint64_t)KILN_DOOR_OPEN) & KILN_DOOR_INSIDE;
  if (inside == 0) {
    return 0;
  }
  /* A worker inside is finishing the one chunk it took: about a chunk's time if it has its CPU.
     Longer, it may have lost its CPU to another process: this thread then yields its CPU to any
     thread waiting for it (the worker, if it was moved here) while it waits, up to the spin
     budget, and sleeps only after that, as a sleeping thread is slow to wake. */
  int seen_contention = 0;
  uint64_t start = kiln_now_ns(), last = start, spin = spin_now(pool, start);
  uint64_t budget = 2 * chunk_ns + KILN_CHUNK_SLACK_NS;
  if (budget > spin) {
    budget = spin;
  }
  for (unsigned i = 1;
       (atomic_load_explicit(&pool->door, memory_order_acquire) & KILN_DOOR_INSIDE) != 0; i++) {
    if ((i & 63) == 0) {
      uint64_t now = kiln_now_ns(), waited = now - start;
      if (waited >= spin) {
        break;
      }
      if (preempted(pool, &last, now)) {
        seen_contention = 1;
        break;
      }
      if (waited >= budget) {
        sched_yield();
        continue;
      }
    }
    cpu_relax();
  }
  if ((atomic_load_explicit(&pool->door, memory_order_acquire) & KILN_DOOR_INSIDE) == 0) {
    return seen_contention;
  }
  pthread_mutex_lock(&pool->mutex);
  atomic_store(&pool->caller_waiting, 1);
  while ((atomic_load(&pool->door) & KILN_DOOR_INSIDE) != 0) {
    pthread_cond_wait(&pool->done, &pool->mutex);
  }
  atomic_store(&pool->caller_waiting, 0);
  pthread_mutex_unlock(&pool->mutex);
  return seen_contention;
}

static void* worker_main(void* arg) {
  kiln_pool* pool = &g_pool;
  const kiln_worker* self = arg;
  uint64_t seen = self->seen;
  t_in_task = 1;
  for (;;) {
    seen = wait_for_launch(pool, seen);
    if (pool->stopping) {
      return NULL;
    }
    if (!join_launch(pool, seen)) {
      continue; /* over before this worker came: nothing of it is left */
    }
    uint64_t wall0 = kiln_now_ns(), cpu0 = watch_launch(wall0);
    run_chunks(pool, self->index);
    ran_off_cpu(pool, wall0, cpu0);
    uint64_t left = atomic_fetch_sub(&pool->door, 1) - 1;
    if ((left & KILN_DOOR_INSIDE) == 0 && !(left & KILN_DOOR_OPEN) &&
        atomic_load(&pool->caller_waiting)) {
      pthread_mutex_lock(&pool->mutex);
      pthread_cond_signal(&pool->done);
      pthread_mutex_unlock(&pool->mutex);
    }
  }
}

/* Pins every worker the plan gave a CPU to. If one cannot be pinned (a CPU outside the affinity
   mask, or a kernel or container that refuses: EINVAL, EPERM), all of them go back to the whole
   mask, so the pool is pinned entirely or not at all. Returns 1 when pinned. */
static int pin_workers(kiln_pool* pool, int nworkers, const cpu_set_t* allowed) {
  int npinned = 0;
  for (int i = 0; i < nworkers; i++) {
    kiln_worker* worker = &pool->workers[i];
    if (worker->cpu < 0) {
      continue;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(worker->cpu, &one);
    if (!CPU_ISSET(worker->cpu, allowed) ||
        pthread_setaffinity_np(worker->thread, sizeof one, &one) != 0) {
      for (int j = 0; j < nworkers; j++) {
        pthread_setaffinity_np(pool->workers[j].thread, sizeof *allowed, allowed);
        pool->workers[j].cpu = -1;
      }
      return 0;
    }
    npinned++;
  }
  return npinned > 0;
}

/* Creates the workers for a pool of `requested` threads (0: the default). Whatever cannot be
   created (no memory, no more threads) leaves a smaller pool; the smallest is the caller alone. */
static void start_workers(kiln_pool* pool, int requested) {
  kiln_thread_plan* plan = malloc(sizeof *plan);
  int nworkers = 0;
  if (plan != NULL) {
    kiln_plan_threads(requested, plan);
    pool->spin_ns = plan->nthreads > CPU_COUNT(&plan->allowed) ? 0 : spin_budget_ns();
    pool->cpus = CPU_COUNT(&plan->allowed);
    /* A pool given more threads than CPUs asked to share them (and does not spin); and
       KILN_CONTENTION=wait keeps every launch on every thread, for tasks that wait on one
       another. */
    const char* contention = getenv("KILN_CONTENTION");
    pool->yields =
        plan->nthreads <= pool->cpus && !(contention != NULL && strcmp(contention, "wait") == 0);
    if (plan->nthreads > 1) {
      pool->workers = calloc((size_t)plan->nthreads - 1, sizeof *pool->workers);
      pool->shares =
          aligned_alloc(_Alignof(kiln_share), (size_t)plan->nthreads * sizeof(kiln_share));
      if (pool->workers == NULL || pool->shares == NULL) {
        free(pool->workers);
        free(pool->shares);
        pool->workers = NULL;
        pool->shares = NULL;
      }
    }
  }
  if (pool->workers != NULL) {
    /* Workers start with every signal blocked, so signals go to the program's own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    uint64_t generation = atomic_load(&pool->generation);
    for (; nworkers < plan->nthreads - 1; nworkers++) {
      kiln_worker* worker = &pool->workers[nworkers];
      worker->index = nworkers + 1;
      worker->cpu = plan->cpu[nworkers + 1];
      worker->seen = generation;
      if (pthread_create(&worker->thread, NULL, worker_main, worker) != 0) {
        break;
      }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  int pinned = nworkers > 0 && pin_workers(pool, nworkers, &plan->allowed);
  pool->caller_cpu = pinned ? plan->cpu[0] : -1;
  atomic_store(&pool->pinned, pinned);
  atomic_store(&pool->nthreads, nworkers + 1);
  atomic_fetch_add(&pool->epoch, 1);
  free(plan);
}

static void stop_workers(kiln_pool* pool) {
  int nworkers = atomic_load(&pool->nthreads) - 1;
  if (nworkers > 0) {
    pool->stopping = 1;
    atomic_fetch_add(&pool->generation, 1);
    pthread_mutex_lock(&pool->mutex);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 0; i < nworkers; i++) {
      pthread_join(pool->workers[i].thread, NULL);
    }
    pool->stopping = 0;
  }
  free(pool->workers);
  free(pool->shares);
  pool->workers = NULL;
  pool->shares = NULL;
  atomic_store(&pool->nthreads, 1);
  atomic_store(&pool->pinned, 0);
  pool->caller_cpu = -1;
}

static void before_fork(void) { pthread_mutex_lock(&g_setup); }

static void after_fork_in_parent(void) { pthread_mutex_unlock(&g_setup); }

/* The child of a fork has only the thread that forked: it forgets the parent's workers (their
   memory is left, as they may have held its locks) and builds its own pool on first use. */
static void after_fork_in_child(void) {
  kiln_pool* pool = &g_pool;
  pthread_mutex_init(&g_setup, NULL);
  pthread_mutex_init(&pool->mutex, NULL);
  pthread_cond_init(&pool->wake, NULL);
  pthread_cond_init(&pool->done, NULL);
  pool->workers = NULL;
  pool->shares = NULL;
  pool->stopping = 0;
  atomic_store(&pool->door, 0);
  atomic_store(&pool->contended_until_ns, 0);
  atomic_store(&pool->backoff_ns, 0);
  atomic_store(&pool->clean, 0);
  pool->next_look_ns = 0;
  atomic_store(&pool->caller_waiting, 0);
  atomic_store(&pool->sleepers, 0);
  atomic_store(&pool->busy, 0);
  atomic_store(&pool->nthreads, 1);
  atomic_store(&pool->pinned, 0);
  pool->caller_cpu = -1;
  atomic_store(&pool->ready, 0);
}

static void register_fork_handlers(void) {
  pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

static kiln_pool* ready_pool(void) {
  kiln_pool* pool = &g_pool;
  if (!atomic_load_explicit(&pool->ready, memory_order_acquire)) {
    pthread_once(&g_fork_handlers, register_fork_handlers);
    pthread_mutex_lock(&g_setup);
    if (!atomic_load_explicit(&pool->ready, memory_order_relaxed)) {
      start_workers(pool, 0);
      atomic_store_explicit(&pool->ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&g_setup);
  }
  return pool;
}

/* A pinned pool pins the threads that launch on it too, each to the CPU the plan left to the
   caller, once per thread and pool: its own chunks then never share a CPU with a worker's. */
static _Thread_local int t_pinned_epoch;

static void pin_caller(kiln_pool* pool) {
  int epoch = atomic_load_explicit(&pool->epoch, memory_order_relaxed);
  if (pool->caller_cpu < 0 || t_pinned_epoch == epoch) {
    return;
  }
  t_pinned_epoch = epoch;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(pool->caller_cpu, &one);
  pthread_setaffinity_np(pthread_self(), sizeof one, &one); /* a refusal leaves it as it was */
}

int32_t kiln_parallel_launch(kiln_task_fn fn, void* closure, int64_t n) {
  if (fn == NULL || n < 0) {
    return KILN_ERR_ARGS;
  }
  if (n == 0) {
    return KILN_OK;
  }
  if (t_in_task) {
    run_serially(fn, closure, n);
    return KILN_OK;
  }
  if (n == 1) {
    /* One iteration holds no thread but this one: a parallel loop inside it may use the pool
       (a batch of one image, parallel over images and, inside, over channels). */
    fn(0, 1, closure);
    return KILN_OK;
  }
  kiln_pool* pool = ready_pool();
  int idle = 0;
  if (!atomic_compare_exchange_strong(&pool->busy, &idle, 1)) {
    /* Another thread's launch holds the pool: run here rather than wait for it. */
    run_serially(fn, closure, n);
    return KILN_OK;
  }
  int nthreads = atomic_load_explicit(&pool->nthreads, memory_order_relaxed);
  if (nthreads == 1) {
    atomic_store_explicit(&pool->busy, 0, memory_order_release);
    run_serially(fn, closure, n);
    return KILN_OK;
  }
  uint64_t start = kiln_now_ns();
  if (run_alone(pool, start, nthreads)) {
    /* With the pool held (its workers idle), so no launch of another thread interleaves. */
    atomic_fetch_add_explicit(&pool->alone_launches, 1, memory_order_relaxed);
    run_serially(fn, closure, n);
    atomic_store_explicit(&pool->busy, 0, memory_order_release);
    return KILN_OK;
  }
  atomic_fetch_add_explicit(&pool->parallel_launches, 1, memory_order_relaxed);
  pin_caller(pool);
  pool->fn = fn;
  pool->closure = closure;
  pool->grain = grain_of(n, nthreads);
  share_out(pool, n, nthreads);
  /* The launching thread's first chunk is its own before any worker can see the launch: it
     always takes part, and starts at once. */
  int64_t first_end = pool->grain < pool->shares[0].end ? pool->grain : pool->shares[0].end;
  atomic_store_explicit(&pool->shares[0].next, first_end, memory_order_relaxed);
  uint64_t generation = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
  atomic_store(&pool->door, door_of(generation));
  atomic_fetch_add(&pool->generation, 1);
  if (atomic_load(&pool->sleepers) > 0) {
    pthread_mutex_lock(&pool->mutex);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
  }
  t_in_task = 1;
  uint64_t cpu0 = watch_launch(start);
  fn(0, first_end, closure);
  int64_t chunks = 1 + run_chunks(pool, 0);
  int off_cpu = ran_off_cpu(pool, start, cpu0);
  uint64_t chunk_ns = (kiln_now_ns() - start) / (uint64_t)chunks;
  t_in_task = 0;
  if (!wait_for_workers(pool, chunk_ns) && !off_cpu) {
    note_clean_launch(pool);
  }
  atomic_store_explicit(&pool->busy, 0, memory_order_release);
  return KILN_OK;
}

int kiln_runtime_threads(void) { return atomic_load(&ready_pool()->nthreads); }

int kiln_runtime_default_threads(void) {
  kiln_thread_plan plan;
  kiln_plan_threads(0, &plan);
  return plan.nthreads;
}

int kiln_runtime_pinned(void) { return atomic_load(&ready_pool()->pinned); }

void kiln_runtime_pool_stats(kiln_pool_stats* out) {
  kiln_pool* pool = &g_pool;
  out->parallel_launches = atomic_load(&pool->parallel_launches);
  out->alone_launches = atomic_load(&pool->alone_launches);
  out->contended = atomic_load(&pool->contended_marks);
  out->spins = atomic_load(&pool->spins);
  out->spins_cut = atomic_load(&pool->spins_cut);
  out->spin_budget_ns = pool->spin_ns;
}

int kiln_runtime_set_threads(int n) {
  if (t_in_task || n < 0) {
    return kiln_runtime_threads();
  }
  kiln_pool* pool = &g_pool;
  pthread_once(&g_fork_handlers, register_fork_handlers);
  pthread_mutex_lock(&g_setup);
  /* A launch from another thread may still hold the pool: wait for it to let go. */
  int idle = 0;
  while (!atomic_compare_exchange_weak(&pool->busy, &idle, 1)) {
    idle = 0;
    sched_yield();
  }
  if (atomic_load(&pool->ready)) {
    stop_workers(pool);
  }
  start_workers(pool, n);
  atomic_store_explicit(&pool->ready, 1, memory_order_release);
  int nthreads = atomic_load(&pool->nthreads);
  atomic_store_explicit(&pool->busy, 0, memory_order_release);
  pthread_mutex_unlock(&g_setup);
  return nthreads;
}

/* Measure jobs in forked children (jobs.h). */
#define _GNU_SOURCE
#include "jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/runtime.h"

enum { RESULT_FD = 3, MAX_RESULT = 1 << 30 };

/* In the child: the limits, then the job; never returns. */
static void run_child(int result_fd, const measure_job* job, const uint8_t* code, size_t code_len,
                      int time_limit_ms) {
  /* Keep only stdin/out/err and the result pipe: a kernel has no business with kilnd's socket. */
  if (dup2(result_fd, RESULT_FD) < 0) _exit(120);
  closefrom(RESULT_FD + 1);
  struct rlimit core = {0, 0};
  setrlimit(RLIMIT_CORE, &core);
  uint64_t memory = job_settings(job)->memory_limit_bytes;
  /* The CUDA driver reserves address space far beyond what a job uses: a GPU job's memory is
     the device's, bounded by the device. */
  if (memory > 0 && !is_gpu_kind(job->artifact_kind)) {
    struct rlimit as = {memory, memory};
    setrlimit(RLIMIT_AS, &as);
  }
  /* CPU time as a backstop to the parent's wall-clock SIGKILL: the limit's seconds, rounded up,
     on every core the kernel's threads may use, and one more. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  rlim_t cpu = (rlim_t)((time_limit_ms + 999) / 1000) * (rlim_t)(cpus > 0 ? cpus : 1) + 1;
  struct rlimit cpu_limit = {cpu, cpu};
  setrlimit(RLIMIT_CPU, &cpu_limit);
  signal(SIGPIPE, SIG_DFL);
  Kiln__V1__MeasureResult r;
  kiln__v1__measure_result__init(&r);
  measure_run(job, code, code_len, &r);
  Kiln__V1__AgentFrame f;
  kiln__v1__agent_frame__init(&f);
  f.kind_case = KILN__V1__AGENT_FRAME__KIND_RESULT;
  f.result = &r;
  size_t len = 0;
  uint8_t* bytes = frame_pack(&f, &len);
  if (!bytes) _exit(121);
  _exit(write_all(RESULT_FD, bytes, len) == 0 ? 0 : 122);
}

int job_start(running_job* j, const measure_job* job, const uint8_t* code, size_t code_len,
              char* err, size_t err_len) {
  memset(j, 0, sizeof *j);
  j->job_id = job->job_id;
  j->fd = -1;
  j->exit_fd = -1;
  int limit = job_settings(job)->time_limit_ms;
  j->time_limit_ms = limit > 0 ? limit : 60000;
  frame_reader_init(&j->reader, MAX_RESULT);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    snprintf(err, err_len, "cannot make a pipe: %s", strerror(errno));
    return -1;
  }
  host_load_sample_now(&j->load_before);
  j->started_ns = kiln_now_ns();
  j->deadline_ns = j->started_ns + (uint64_t)j->time_limit_ms * 1000000u;
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, err_len, "cannot fork: %s", strerror(errno));
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (pid == 0) {
    close(p[0]);
    run_child(p[1], job, code, code_len, j->time_limit_ms);
  }
  close(p[1]);
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  j->pid = pid;
  j->fd = p[0];
  /* Close-on-exec; -1 before Linux 5.3, when the caller polls more often instead. */
  j->exit_fd = pidfd_open(pid, 0);
  return 0;
}

/* Reads what the child has sent so far: until the pipe is empty (EAGAIN) or closed. */
static void drain(running_job* j) {
  while (j->fd >= 0) {
    uint8_t chunk[1 << 16];
    ssize_t got = read(j->fd, chunk, sizeof chunk);
    if (got > 0) {
      char err[256];
      if (frame_reader_feed(&j->reader, chunk, (size_t)got, err, sizeof err) != 0) {
        close(j->fd); /* a child that sends nonsense is done */
        j->fd = -1;
        if (j->pid > 0) kill(j->pid, SIGKILL);
      }
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    close(j->fd);
    j->fd = -1;
  }
}

static void close_exit_fd(running_job* j) {
  if (j->exit_fd >= 0) close(j->exit_fd);
  j->exit_fd = -1;
}

int job_wait_fd(const running_job* j) { return j->fd >= 0 ? j->fd : j->exit_fd; }

int job_poll(running_job* j, uint64_t now_ns) {
  drain(j);
  if (j->pid > 0 && now_ns >= j->deadline_ns && !j->killed_for_time) {
    kill(j->pid, SIGKILL);
    j->killed_for_time = 1;
  }
  struct rusage used;
  if (j->pid > 0 && wait4(j->pid, &j->status, WNOHANG, &used) == j->pid) {
    host_load_sample_now(&j->load_after);
    j->cpu_s = (double)(used.ru_utime.tv_sec + used.ru_stime.tv_sec) +
               (double)(used.ru_utime.tv_usec + used.ru_stime.tv_usec) * 1e-6;
    j->pid = 0;
    close_exit_fd(j);
    /* What it wrote between the read above and its exit is still in the pipe. */
    drain(j);
    /* Still open: a process it started holds the pipe, and the job is over all the same. */
    if (j->fd >= 0) {
      close(j->fd);
      j->fd = -1;
    }
  }
  return j->pid == 0;
}

static const char* signal_name(int sig) {
  const char* name = sigabbrev_np(sig);
  return name ? name : "?";
}

uint8_t* job_result(running_job* j, size_t* len) {
  Kiln__V1__MeasureResult r;
  kiln__v1__measure_result__init(&r);
  r.job_id = j->job_id;
  agent_frame* sent = NULL;
  char err[256];
  int whole = frame_reader_next(&j->reader, &sent, err, sizeof err) == 1 &&
              sent->kind_case == KILN__V1__AGENT_FRAME__KIND_RESULT;
  Kiln__V1__MeasureResult* from_child = whole ? sent->result : &r;
  if (whole) {
    from_child->job_id = j->job_id;
  } else if (j->cancelled && WIFSIGNALED(j->status) && WTERMSIG(j->status) == SIGKILL &&
             !j->killed_for_time) {
    result_error(&r, KILN__V1__MEASURE_RESULT__ERROR__CANCELLED,
                 "cancelled by kilnd (its request went away); the job's process was killed");
  } else if (j->killed_for_time) {
    result_error(&r, KILN__V1__MEASURE_RESULT__ERROR__TIMEOUT, "killed at the time limit of %d ms",
                 j->time_limit_ms);
  } else if (WIFSIGNALED(j->status)) {
    int sig = WTERMSIG(j->status);
    r.signal = sig;
    if (sig == SIGXCPU)
      result_error(&r, KILN__V1__MEASURE_RESULT__ERROR__TIMEOUT,
                   "stopped by SIGXCPU at its CPU-time limit (the time limit of %d ms on every "
                   "core)",
                   j->time_limit_ms);
    else if (sig == SIGKILL)
      result_error(&r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY,
                   "the job was killed by SIGKILL, not by the agent (the system's out-of-memory "
                   "killer?)");
    else
      result_error(&r, KILN__V1__MEASURE_RESULT__ERROR__RUNTIME_CRASH,
                   "the kernel crashed with SIG%s (%s); the agent is unaffected", signal_name(sig),
                   strsignal(sig));
  } else {
    result_error(&r, KILN__V1__MEASURE_RESULT__ERROR__RUNTIME_CRASH,
                 "the job's process exited with status %d without a result",
                 WIFEXITED(j->status) ? WEXITSTATUS(j->status) : -1);
  }
  Kiln__V1__AgentFrame f;
  kiln__v1__agent_frame__init(&f);
  f.kind_case = KILN__V1__AGENT_FRAME__KIND_RESULT;
  f.result = from_child;
  /* A job the agent reaped (not one abandoned): the host while it ran. */
  if (j->load_after.wall_ns) {
    host_load_between(&j->load_before, &j->load_after, j->cpu_s, &j->load);
    from_child->host = &j->load;
  }
  uint8_t* bytes = frame_pack(&f, len);
  from_child->host = NULL; /* j's, not the unpacked message's to free */
  frame_free(sent);
  frame_reader_free(&j->reader);
  return bytes;
}

void job_cancel(running_job* j) {
  if (j->pid > 0 && !j->cancelled) kill(j->pid, SIGKILL);
  j->cancelled = 1;
}

void job_abandon(running_job* j) {
  if (j->pid > 0) {
    kill(j->pid, SIGKILL);
    while (waitpid(j->pid, &j->status, 0) < 0 && errno == EINTR) {
    }
    j->pid = 0;
  }
  close_exit_fd(j);
  if (j->fd >= 0) close(j->fd);
  j->fd = -1;
  frame_reader_free(&j->reader);
}

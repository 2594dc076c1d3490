/* Measure jobs in forked children: each runs under a wall-clock limit (SIGKILL at the limit)
   and an address-space limit, sends its result up a pipe, and exits; a child that crashes,
   hangs or runs out of memory becomes that job's result, and the agent goes on. */
#ifndef KILN_AGENT_JOBS_H
#define KILN_AGENT_JOBS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "frame.h"
#include "host_load.h"
#include "measure.h"

typedef struct {
  uint64_t job_id;
  pid_t pid;           /* 0 once reaped */
  int fd;              /* the result pipe's read end; -1 once it closed */
  int exit_fd;         /* readable once the child has exited (a pidfd), or -1 */
  frame_reader reader; /* what the child sent */
  uint64_t started_ns, deadline_ns;
  int time_limit_ms;
  int killed_for_time;
  int cancelled; /* killed because kilnd cancelled the job */
  int status;    /* waitpid's, once reaped */
  /* The host from the fork to the reaping, and the CPU time the child used (host_load.h). */
  host_load_sample load_before, load_after;
  double cpu_s;
  Kiln__V1__HostLoad load;
} running_job;

/* Forks the child that runs `job` on `code`. 0, or -1 with a message (fork or pipe failed). */
int job_start(running_job* j, const measure_job* job, const uint8_t* code, size_t code_len,
              char* err, size_t err_len);

/* Reads what the child sent (call when j->fd is readable), kills it past its deadline, and
   reaps it once it has ended. 1 when the job is over, 0 while it runs. */
int job_poll(running_job* j, uint64_t now_ns);

/* The result frame of a job that is over: the child's own, or one saying how it ended
   (RUNTIME_CRASH with the signal, TIMEOUT, ...), with the host's load while it ran. Frees the
   job's buffers. */
uint8_t* job_result(running_job* j, size_t* len);

/* What to poll for the job: its result pipe while open, then its exit; -1 when there is
   nothing (no pidfd on an old kernel: poll with a short timeout instead). */
int job_wait_fd(const running_job* j);

/* Kills the child because kilnd cancelled the job: job_poll reaps it, and job_result answers
   CANCELLED unless the child had sent its result first. */
void job_cancel(running_job* j);
/* Kills and reaps the child (the connection to kilnd went away). */
void job_abandon(running_job* j);

#endif

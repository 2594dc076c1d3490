/* The agent's log (log.h). */
#define _GNU_SOURCE
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

int log_threshold = LOG_INFO;

void log_line(int level, const char* fmt, ...) {
  if (level < log_threshold) return;
  static const char* const names[] = {"debug", "info", "warning", "error"};
  char stamp[32] = "";
  struct timespec now;
  struct tm tm;
  if (clock_gettime(CLOCK_REALTIME, &now) == 0 && localtime_r(&now.tv_sec, &tm))
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  char line[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[%s.%03ld] [kiln-agent] [%s] %s\n", stamp, now.tv_nsec / 1000000L,
          names[level & 3], line);
}

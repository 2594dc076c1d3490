/* The agent's log: one line per event on standard error, with the time and the level. */
#ifndef KILN_AGENT_LOG_H
#define KILN_AGENT_LOG_H

enum { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

extern int log_threshold; /* lines below it are not written; LOG_INFO by default */

void log_line(int level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

/* status.c — the status table's strings and the thread-local last error. */
#include "core/status.h"

#include <stdarg.h>
#include <string.h>

static const char* const k_names[] = {
#define TL__STATUS_NAME(name, msg) "TL_" #name,
    TL_STATUS_MAP(TL__STATUS_NAME)
#undef TL__STATUS_NAME
};

static const char* const k_messages[] = {
#define TL__STATUS_MSG(name, msg) msg,
    TL_STATUS_MAP(TL__STATUS_MSG)
#undef TL__STATUS_MSG
};

/* Large enough for a config's full list of problems (one per line). */
static _Thread_local char t_message[8192];

const char* tl_status_name(tl_status s) {
  if ((int)s < 0 || s >= TL_STATUS_COUNT) return "TL_UNKNOWN_STATUS";
  return k_names[s];
}

const char* tl_status_message(tl_status s) {
  if ((int)s < 0 || s >= TL_STATUS_COUNT) return "unknown status";
  return k_messages[s];
}

const char* tl_last_error(void) {
  return t_message;
}

/* The length of a "name.c:123: " prefix at s (a base name of letters,
 * digits, '_', '-' and '.', a line number), 0 when s does not start with
 * one. */
static size_t where_prefix(const char* s) {
  size_t i = 0;
  while (s[i] && (s[i] == '_' || s[i] == '-' || s[i] == '.' || (s[i] >= 'a' && s[i] <= 'z') ||
                  (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
    i++;
  if (i == 0 || s[i] != ':' || !memchr(s, '.', i)) return 0;
  size_t j = i + 1;
  while (s[j] >= '0' && s[j] <= '9') j++;
  if (j == i + 1 || s[j] != ':' || s[j + 1] != ' ') return 0;
  return j + 2;
}

const char* tl_last_error_message(void) {
  const char* s = t_message;
  for (size_t n; (n = where_prefix(s)) > 0;) s += n;
  return s;
}

void tl_clear_error(void) {
  t_message[0] = '\0';
}

tl_status tl__set_error(tl_status code, const char* file, int line, const char* fmt, ...) {
  /* Keep only the file's base name: messages are for people, not paths. */
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  int n = snprintf(t_message, sizeof t_message, "%s:%d: ", base, line);
  if (n < 0 || (size_t)n >= sizeof t_message) n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_message + n, sizeof t_message - (size_t)n, fmt, ap);
  va_end(ap);
  return code;
}

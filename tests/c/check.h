/* The C tests' check (tests/c): CHECK(cond, fmt, ...) counts a failure and says where, what
 * and why on stderr, and the test goes on; the test's main makes its exit status of `failures`.
 * One test per program, so `failures` is that program's own. */
#ifndef SB_TESTS_C_CHECK_H
#define SB_TESTS_C_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      failures++;                                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);                 \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fputc('\n', stderr);                                                                     \
    }                                                                                          \
  } while (0)

#endif

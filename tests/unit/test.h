/* A minimal test harness: each TEST runs in its own forked process, so a crash or a sanitizer
 * report fails only that test. Asserts print both values. */
#ifndef COLO_TEST_H
#define COLO_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*test_fn)(void);
typedef struct {
  const char *name;
  test_fn fn;
} test_case_t;

#define MAX_TESTS 256
extern test_case_t test_cases[MAX_TESTS];
extern int test_count;

#define TEST(name)                                                                                 \
  static void name(void);                                                                          \
  __attribute__((constructor)) static void register_##name(void) {                                 \
    test_cases[test_count++] = (test_case_t){#name, name};                                         \
  }                                                                                                \
  static void name(void)

#define FAIL_AT(...)                                                                               \
  do {                                                                                             \
    fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                              \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    exit(1);                                                                                       \
  } while (0)

#define ASSERT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      FAIL_AT("assertion failed: %s", #cond);                                                      \
  } while (0)

#define ASSERT_EQ_INT(a, b)                                                                        \
  do {                                                                                             \
    long long va_ = (long long)(a), vb_ = (long long)(b);                                          \
    if (va_ != vb_)                                                                                \
      FAIL_AT("%s == %s: %lld != %lld", #a, #b, va_, vb_);                                         \
  } while (0)

#define ASSERT_EQ_STR(a, b)                                                                        \
  do {                                                                                             \
    const char *sa_ = (a), *sb_ = (b);                                                             \
    if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0)                                                     \
      FAIL_AT("%s == %s:\n    got:      \"%s\"\n    expected: \"%s\"", #a, #b,                     \
              sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                                         \
  } while (0)

/* Runs every test (or those named on the command line) in its own process. */
#define TEST_MAIN()                                                                                \
  test_case_t test_cases[MAX_TESTS];                                                               \
  int test_count;                                                                                  \
  int main(int argc, char **argv) {                                                                \
    int passed = 0, failed = 0;                                                                    \
    for (int i = 0; i < test_count; i++) {                                                         \
      int want = argc < 2;                                                                         \
      for (int k = 1; k < argc; k++)                                                               \
        want |= strcmp(argv[k], test_cases[i].name) == 0;                                          \
      if (!want)                                                                                   \
        continue;                                                                                  \
      fflush(stdout);                                                                              \
      pid_t pid = fork();                                                                          \
      if (pid == 0) {                                                                              \
        test_cases[i].fn();                                                                        \
        exit(0);                                                                                   \
      }                                                                                            \
      int status = 0;                                                                              \
      waitpid(pid, &status, 0);                                                                    \
      int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;                                      \
      printf("%s %s\n", ok ? "PASS" : "FAIL", test_cases[i].name);                                 \
      if (!ok && WIFSIGNALED(status))                                                              \
        printf("  killed by signal %d\n", WTERMSIG(status));                                       \
      ok ? passed++ : failed++;                                                                    \
    }                                                                                              \
    printf("%d passed, %d failed\n", passed, failed);                                              \
    return failed ? 1 : 0;                                                                         \
  }

#endif

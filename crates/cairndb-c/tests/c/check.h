/* Assertions shared by the C test programs: each failure names its line
   and ends the program with status 1. */

#ifndef CAIRNDB_C_TEST_CHECK_H
#define CAIRNDB_C_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
              #cond);                                                    \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

/* No error: err is NULL (else print it and fail). */
#define CHECK_NO_ERROR(err)                                               \
  do {                                                                    \
    if ((err) != NULL) {                                                  \
      fprintf(stderr, "%s:%d: unexpected error: %s\n", __FILE__, __LINE__, \
              (err));                                                     \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

/* An error containing `part`; freed and reset to NULL afterwards. */
#define CHECK_ERROR(err, part)                                             \
  do {                                                                     \
    if ((err) == NULL || strstr((err), (part)) == NULL) {                  \
      fprintf(stderr, "%s:%d: expected an error with \"%s\", got %s\n",    \
              __FILE__, __LINE__, (part), (err) ? (err) : "no error");     \
      exit(1);                                                             \
    }                                                                      \
    free(err);                                                             \
    (err) = NULL;                                                          \
  } while (0)

/* The value `val` of length `len` equals the C string `want`. */
static inline int same(const char* val, size_t len, const char* want) {
  return val != NULL && len == strlen(want) && memcmp(val, want, len) == 0;
}

#endif

// CHECK for broken invariants (never for bad input: that gets an absl::Status). Aborts with file:line.
#ifndef STEADY_BASE_CHECK_H_
#define STEADY_BASE_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define STEADY_CHECK(cond)                                                                \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#endif  // STEADY_BASE_CHECK_H_

/* The C API compiles as C and maps errors to codes + messages (single rank, no network). */
#define _POSIX_C_SOURCE 200809L
#include <nezha/nezha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(void) {
  nezha_comm_t comm = NULL;
  /* Malformed rails: a config error naming the variable, no communicator. */
  setenv("NEZHA_RAILS", "r0=lo", 1);
  setenv("NEZHA_RANK", "0", 1);
  setenv("NEZHA_WORLD_SIZE", "1", 1);
  CHECK(nezha_init_from_env(&comm) == NEZHA_ERR_CONFIG);
  CHECK(comm == NULL);
  CHECK(strstr(nezha_last_error(), "NEZHA_RAILS") != NULL);

  setenv("NEZHA_RAILS", "r0=lo:tcp", 1);
  CHECK(nezha_init_from_env(&comm) == NEZHA_OK);
  CHECK(comm != NULL);
  CHECK(nezha_rank(comm) == 0 && nezha_world_size(comm) == 1);
  int32_t in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
  CHECK(nezha_allreduce(comm, in, out, 3, NEZHA_INT32, NEZHA_SUM) == NEZHA_OK);
  CHECK(out[0] == 1 && out[1] == 2 && out[2] == 3);
  CHECK(nezha_broadcast(comm, in, 3, NEZHA_INT32, 1) == NEZHA_ERR_INVALID);
  CHECK(strstr(nezha_last_error(), "root 1") != NULL);
  CHECK(nezha_allreduce(comm, in, out, 3, (nezha_dtype_t)42, NEZHA_SUM) == NEZHA_ERR_INVALID);
  /* alltoall on one rank: its own block comes back; a null buffer is an error. */
  int32_t a2a[2] = {0, 0};
  CHECK(nezha_alltoall(comm, in, a2a, 2, NEZHA_INT32) == NEZHA_OK);
  CHECK(a2a[0] == in[0] && a2a[1] == in[1]);
  CHECK(nezha_alltoall(comm, NULL, a2a, 2, NEZHA_INT32) == NEZHA_ERR_INVALID);
  CHECK(strstr(nezha_last_error(), "alltoall") != NULL);
  size_t one = 2, zero = 0;
  CHECK(nezha_alltoallv(comm, in, &one, &zero, a2a, &one, &zero, NEZHA_INT32) == NEZHA_OK);
  CHECK(nezha_barrier(comm) == NEZHA_OK);
  CHECK(strcmp(nezha_last_error(), "") == 0);
  nezha_destroy(comm);
  if (failures == 0) printf("c_api_test: ok\n");
  return failures == 0 ? 0 : 1;
}

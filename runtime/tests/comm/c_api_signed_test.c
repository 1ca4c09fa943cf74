/* Signed operations through the C API (nezha_sign_next_op, NEZHA_ERR_MISMATCH): two ranks as
 * forked processes on loopback. Ranks that sign alike get their result; a signature over the
 * header's room is NEZHA_ERR_INVALID and leaves the communicator usable; ranks that sign the
 * same bytes' worth of work differently (float vs int32, equal sizes: the data would move)
 * both get NEZHA_ERR_MISMATCH naming each rank, and the communicator refuses what follows. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nezha/nezha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %s: %s:%d: CHECK failed: %s (last error: %s)\n", getenv("NEZHA_RANK"), \
              __FILE__, __LINE__, #cond, nezha_last_error());                                      \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

/* A port the kernel just handed out on loopback, for rank 0's rendezvous. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    perror("free_port");
    exit(2);
  }
  close(fd);
  return ntohs(a.sin_port);
}

static int sign(nezha_comm_t comm, const char* what) {
  return nezha_sign_next_op(comm, what, strlen(what));
}

static int run_rank(int rank) {
  char r[2] = {(char)('0' + rank), 0};
  setenv("NEZHA_RANK", r, 1);
  alarm(120); /* a hang fails the test instead of stalling it */
  nezha_comm_t comm = NULL;
  CHECK(nezha_init_from_env(&comm) == NEZHA_OK);
  if (comm == NULL) return 1;

  float f[4] = {1, 1, 1, 1};
  CHECK(sign(comm, "allreduce f32[4] SUM") == NEZHA_OK);
  CHECK(nezha_allreduce(comm, f, f, 4, NEZHA_FLOAT32, NEZHA_SUM) == NEZHA_OK);
  CHECK(f[0] == 2 && f[3] == 2);

  char wide[NEZHA_OP_SIGNATURE_MAX + 1];
  memset(wide, 'x', sizeof wide);
  CHECK(nezha_sign_next_op(comm, wide, sizeof wide) == NEZHA_ERR_INVALID);
  CHECK(strstr(nezha_last_error(), "33 bytes") != NULL);
  CHECK(nezha_sign_next_op(comm, NULL, 4) == NEZHA_ERR_INVALID);
  CHECK(nezha_sign_next_op(NULL, "x", 1) == NEZHA_ERR_INVALID);
  CHECK(sign(comm, "allreduce f32[4] SUM") == NEZHA_OK); /* still usable */
  CHECK(nezha_allreduce(comm, f, f, 4, NEZHA_FLOAT32, NEZHA_SUM) == NEZHA_OK);
  CHECK(f[0] == 4);

  /* Equal byte sizes, other dtypes: the bytes would move and sum to garbage unchecked. */
  int32_t i[4] = {1, 1, 1, 1};
  CHECK(sign(comm, rank == 0 ? "allreduce f32[4] SUM" : "allreduce i32[4] SUM") == NEZHA_OK);
  const int got = rank == 0 ? nezha_allreduce(comm, f, f, 4, NEZHA_FLOAT32, NEZHA_SUM)
                            : nezha_allreduce(comm, i, i, 4, NEZHA_INT32, NEZHA_SUM);
  CHECK(got == NEZHA_ERR_MISMATCH);
  CHECK(strstr(nezha_last_error(), "rank 0 sent operation") != NULL);
  CHECK(strstr(nezha_last_error(), "rank 1 sent operation") != NULL);
  CHECK(strstr(nezha_last_error(), "unusable") != NULL);
  CHECK(nezha_allreduce(comm, f, f, 4, NEZHA_FLOAT32, NEZHA_SUM) != NEZHA_OK);
  nezha_destroy(comm);
  return failures == 0 ? 0 : 1;
}

int main(void) {
  char port[32];
  snprintf(port, sizeof port, "127.0.0.1:%d", free_port());
  setenv("NEZHA_RENDEZVOUS", port, 1);
  setenv("NEZHA_WORLD_SIZE", "2", 1);
  setenv("NEZHA_RAILS", "r0=lo:tcp", 1);
  setenv("NEZHA_JOB_TOKEN", "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a", 1);
  setenv("NEZHA_PROBE_BYTES", "64K", 1);
  setenv("NEZHA_RENDEZVOUS_TIMEOUT_MS", "30000", 1);
  setenv("NEZHA_IO_TIMEOUT_MS", "20000", 1);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] < 0) {
      perror("fork");
      return 2;
    }
    if (pids[rank] == 0) _exit(run_rank(rank));
  }
  int ok = 1;
  for (int rank = 0; rank < 2; ++rank) {
    int status = 0;
    waitpid(pids[rank], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d failed (wait status %d)\n", rank, status);
      ok = 0;
    }
  }
  if (ok) printf("c_api_signed_test: ok\n");
  return ok ? 0 : 1;
}

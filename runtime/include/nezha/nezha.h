/* libnezha C API: multi-rail collectives on host memory.
 *
 * Stable, small and C-only so Python (ctypes) and other languages can bind it. Every call
 * returns a nezha_status_t; on failure nezha_last_error() gives a message for the calling
 * thread. NEZHA_ERR_RAIL is recoverable in principle (a rail's I/O failed; a later release
 * replays on the surviving rails); the other codes mean the call or its configuration is wrong.
 *
 * Collectives must be called by every rank in the same order with the same sizes (like MPI). */
#ifndef NEZHA_NEZHA_H_
#define NEZHA_NEZHA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  NEZHA_OK = 0,
  NEZHA_ERR_CONFIG = 1,   /* bad environment/options; message names the field */
  NEZHA_ERR_RAIL = 2,     /* a rail's network I/O failed or timed out */
  NEZHA_ERR_AUTH = 3,     /* a peer or the rendezvous failed the NEZHA_JOB_TOKEN proof */
  NEZHA_ERR_INVALID = 4,  /* invalid argument (null pointer, bad root, ...) */
  NEZHA_ERR_INTERNAL = 5, /* bug check failed */
  /* The ranks called different operations: the signatures they gave it (nezha_sign_next_op)
   * differ, or they are in different operations. Every rank that compared gets it, with a
   * message naming each rank's operation and signature. Not a rail failure: the callers are
   * out of step, and the communicator is unusable (a skipped operation shifts every later
   * one): destroy it and build a new one. */
  NEZHA_ERR_MISMATCH = 6
} nezha_status_t;

typedef enum {
  NEZHA_FLOAT32 = 0,
  NEZHA_FLOAT64 = 1,
  NEZHA_FLOAT16 = 2,
  NEZHA_BFLOAT16 = 3,
  NEZHA_INT32 = 4,
  NEZHA_INT64 = 5,
  /* Not a type: widens the enum to int, so a bad value from a caller is an error
   * (NEZHA_ERR_INVALID), not undefined behaviour in the library. */
  NEZHA_DTYPE_MAX_ENUM = 0x7fffffff
} nezha_dtype_t;

typedef enum {
  NEZHA_SUM = 0,
  NEZHA_PROD = 1,
  NEZHA_MIN = 2,
  NEZHA_MAX = 3,
  NEZHA_OP_MAX_ENUM = 0x7fffffff /* not an op: see NEZHA_DTYPE_MAX_ENUM */
} nezha_op_t;

typedef struct nezha_comm* nezha_comm_t;

/* Builds a communicator from NEZHA_* environment variables (see runtime/README.md):
 * rendezvous, authentication, rail connections and the bandwidth probe. Blocks until every
 * rank has joined or NEZHA_RENDEZVOUS_TIMEOUT_MS elapses. */
nezha_status_t nezha_init_from_env(nezha_comm_t* comm);
void nezha_destroy(nezha_comm_t comm);

int nezha_rank(nezha_comm_t comm);
int nezha_world_size(nezha_comm_t comm);

/* sendbuf == recvbuf means in-place. */
nezha_status_t nezha_allreduce(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                               nezha_dtype_t dtype, nezha_op_t op);
nezha_status_t nezha_broadcast(nezha_comm_t comm, void* buf, size_t count, nezha_dtype_t dtype,
                               int root);
/* recvbuf holds world_size * count elements; in-place when sendbuf == recvbuf + rank*count. */
nezha_status_t nezha_allgather(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                               nezha_dtype_t dtype);
/* sendbuf holds world_size * recvcount elements; in-place when
 * recvbuf == sendbuf + rank*recvcount. */
nezha_status_t nezha_reduce_scatter(nezha_comm_t comm, const void* sendbuf, void* recvbuf,
                                    size_t recvcount, nezha_dtype_t dtype, nezha_op_t op);
nezha_status_t nezha_barrier(nezha_comm_t comm);

/* Rooted collectives, built on the ones above (so split across rails and failover-protected
 * like them; bandwidth costs in nezha.hpp). recvbuf may be NULL on non-roots of reduce/gather,
 * sendbuf on non-roots of scatter. gather's recvbuf and scatter's sendbuf hold
 * world_size * count elements. */
nezha_status_t nezha_reduce(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                            nezha_dtype_t dtype, nezha_op_t op, int root);
nezha_status_t nezha_gather(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                            nezha_dtype_t dtype, int root);
nezha_status_t nezha_scatter(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                             nezha_dtype_t dtype, int root);
/* Personalized exchange: each block moves once, straight to its rank, split across rails and
 * failover-protected. alltoall: sendbuf and recvbuf hold world_size * count elements; block p of
 * sendbuf goes to rank p, block p of recvbuf comes from rank p. alltoallv: counts and
 * displacements in elements, world_size entries each; recvcounts[p] must equal what rank p
 * sends to this rank (checked on every rank). */
nezha_status_t nezha_alltoall(nezha_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                              nezha_dtype_t dtype);
nezha_status_t nezha_alltoallv(nezha_comm_t comm, const void* sendbuf, const size_t* sendcounts,
                               const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                               const size_t* rdispls, nezha_dtype_t dtype);

/* Signs the next collective this rank starts on `comm` with `length` (at most
 * NEZHA_OP_SIGNATURE_MAX) caller-chosen bytes, zero-padded: an opaque digest of the call's
 * arguments (collective, dtype, count, reduce op, root, a sequence number; their meaning is the
 * caller's). They travel in that operation's first frames to every peer of each rail it uses,
 * ahead of its data, and every rank compares them with its own before it accepts the result:
 * ranks that signed other bytes, or are in another operation, make it fail with
 * NEZHA_ERR_MISMATCH on every rank that compared. A later call replaces a signature not yet
 * used; every rank must sign the same operations (an unsigned peer is out of step). Costs 44
 * bytes per peer and rail in the operation's first exchange, in the same write as its data on
 * TCP: no message and no wait of its own (runtime/README.md "Signed operations").
 * NEZHA_ERR_INVALID: null bytes with a nonzero length, or more than NEZHA_OP_SIGNATURE_MAX. */
#define NEZHA_OP_SIGNATURE_MAX 32
nezha_status_t nezha_sign_next_op(nezha_comm_t comm, const void* bytes, size_t length);

/* Writes the data-length table (split ratios per collective/world size/size bucket) as JSON. */
nezha_status_t nezha_save_table(nezha_comm_t comm, const char* path);

/* Message of the last failed call on this thread ("" if none). */
const char* nezha_last_error(void);

/* The C API's version: NEZHA_API_VERSION of the library that was built. Raised when a function's
 * parameters, an enum's values or a call's meaning change, not when a function is added.
 * Bindings compare it at load time with the version they were written for (ctypes:
 * runtime/python/nezha/_lib.py) so a mismatched library fails at once, naming both, instead of
 * misreading arguments. */
#define NEZHA_API_VERSION 2 /* 2: NEZHA_ERR_MISMATCH (and nezha_sign_next_op) */
int nezha_api_version(void);

#ifdef __cplusplus
}
#endif
#endif /* NEZHA_NEZHA_H_ */

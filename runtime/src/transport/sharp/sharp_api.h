// The subset of the SHARP collective library's public API (libsharp_coll.so) that libnezha uses,
// declared here because the library ships only with vendor stacks (HPC-X, MLNX_OFED/DOCA) and is
// loaded at run time with dlopen (sharp_library.h), never linked.
//
// Source of the layouts: the public header <sharp/api/sharp_coll.h> of NVIDIA SHARP (the
// 2015-2023 copyright revision, SHARP 3.x, as shipped with HPC-X), which nccl-rdma-sharp-plugins,
// UCC's tl/sharp and MVAPICH build against. Only what is used is declared; enum values and
// struct members keep that header's order and types, so the layouts are the library's (checked
// by static_asserts on x86-64 / aarch64 LP64 below). Reserved members are kept because the
// library reads whole structs. The layouts are those of SHARP 3.x only: SHARP 2.x numbered the
// datatypes differently (no BFLOAT16/UINT8/INT8, so SHARP_DTYPE_NULL had another value), which
// is why sharp_library.cc refuses an older library (kMinSoVersion below).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nezha::sharp {

enum sharp_datatype : int {
  SHARP_DTYPE_UNSIGNED,
  SHARP_DTYPE_INT,
  SHARP_DTYPE_UNSIGNED_LONG,
  SHARP_DTYPE_LONG,
  SHARP_DTYPE_FLOAT,
  SHARP_DTYPE_DOUBLE,
  SHARP_DTYPE_UNSIGNED_SHORT,
  SHARP_DTYPE_SHORT,
  SHARP_DTYPE_FLOAT_SHORT,
  SHARP_DTYPE_BFLOAT16,
  SHARP_DTYPE_UINT8,
  SHARP_DTYPE_INT8,
  SHARP_DTYPE_NULL
};

enum sharp_reduce_op : int {
  SHARP_OP_MAX,
  SHARP_OP_MIN,
  SHARP_OP_SUM,
  SHARP_OP_PROD,
  SHARP_OP_LAND,
  SHARP_OP_BAND,
  SHARP_OP_LOR,
  SHARP_OP_BOR,
  SHARP_OP_LXOR,
  SHARP_OP_BXOR,
  SHARP_OP_MAXLOC,
  SHARP_OP_MINLOC,
  SHARP_OP_NULL
};

enum sharp_error_no : int {
  SHARP_COLL_SUCCESS = 0,
  SHARP_COLL_ERROR = -1,
  SHARP_COLL_ENOT_SUPP = -2,
  SHARP_COLL_ENOMEM = -3,
  SHARP_COLL_EGROUP_ALLOC = -4,
  SHARP_COLL_ECONN_TREE = -5,
  SHARP_COLL_EGROUP_JOIN = -6,
  SHARP_COLL_ESESS_INIT = -8,
  SHARP_COLL_EDEV = -9,
  SHARP_COLL_EINVAL = -10,
  SHARP_COLL_EGROUP_ID = -14,
  SHARP_COLL_EOOB = -15,
};

enum sharp_aggregation_mode : int { SHARP_AGGREGATION_NONE = 0 };
enum sharp_data_buffer_type : int { SHARP_DATA_BUFFER, SHARP_DATA_IOV };
enum sharp_data_memory_type : int { SHARP_MEM_TYPE_HOST, SHARP_MEM_TYPE_CUDA, SHARP_MEM_TYPE_LAST };

struct sharp_coll_context;  // opaque
struct sharp_coll_comm;     // opaque

struct sharp_coll_config {
  const char* ib_dev_list;  // "mlx5_0:1": HCA and port of the SHARP rail
  int user_progress_num_polls;
  int coll_timeout;  // ms per collective, -1 = infinite
  uint32_t flags;
  int reserved[3];
};

// The library's defaults (exported data symbol `sharp_coll_default_config`): callers copy it
// and change only what they need, so fields the library gives meaning to keep its values.

struct sharp_coll_out_of_band_colls {
  int (*bcast)(void* context, void* buffer, int len, int root);
  int (*barrier)(void* context);
  int (*gather)(void* context, int root, void* sbuf, void* rbuf, int len);
};

struct sharp_coll_comm_init_spec {
  int rank;
  int size;
  void* oob_ctx;
  const uint32_t* group_world_ranks;
  int reserved[2];
};

struct sharp_coll_init_spec {
  uint64_t job_id;
  int world_rank;
  int world_size;
  int (*progress_func)(void);
  int group_channel_idx;
  sharp_coll_config config;
  sharp_coll_out_of_band_colls oob_colls;
  int world_local_rank;
  int enable_thread_support;
  void* oob_ctx;
  int reserved[4];
};

// What the fabric's SHARP generation aggregates (sharp_coll_caps_query). Bit i of
// support_mask.dtypes is sharp_datatype i; of support_mask.reduce_ops, sharp_reduce_op i.
struct sharp_coll_caps {
  int sharp_pkt_version;
  uint64_t reserved[2];
  struct {
    uint64_t dtypes;
    uint64_t tag_dtypes;
    uint64_t reduce_ops;
    uint64_t feature_mask;
    uint64_t reserved[4];
  } support_mask;
  struct {
    int max_osts;
    int user_data_per_ost;
    int max_groups;
    int max_group_channels;
    int osts_per_group;
  } resources;
};

struct sharp_data_iov {
  void* ptr;
  size_t length;
  void* mem_handle;
};

struct sharp_coll_data_desc {
  sharp_data_buffer_type type;
  sharp_data_memory_type mem_type;
  int reserved[2];
  union {
    struct {
      void* ptr;
      size_t length;
      void* mem_handle;  // from sharp_coll_reg_mr
    } buffer;
    struct {
      unsigned count;
      sharp_data_iov* vector;
    } iov;
  };
};

struct sharp_coll_reduce_spec {
  int root;  // ignored for allreduce
  sharp_coll_data_desc sbuf_desc;
  sharp_coll_data_desc rbuf_desc;
  sharp_datatype dtype;
  size_t length;  // elements
  sharp_reduce_op op;
  sharp_datatype tag_dtype;
  sharp_aggregation_mode aggr_mode;
  int stream_lock_batch_size;
  size_t offset;
  int reserved[2];
};

#if defined(__LP64__)
static_assert(sizeof(sharp_coll_config) == 32, "sharp_coll_config layout");
static_assert(sizeof(sharp_coll_init_spec) == 120, "sharp_coll_init_spec layout");
static_assert(sizeof(sharp_coll_comm_init_spec) == 32, "sharp_coll_comm_init_spec layout");
static_assert(sizeof(sharp_coll_data_desc) == 40, "sharp_coll_data_desc layout");
static_assert(sizeof(sharp_coll_reduce_spec) == 136, "sharp_coll_reduce_spec layout");
static_assert(sizeof(sharp_coll_caps) == 112, "sharp_coll_caps layout");
static_assert(offsetof(sharp_coll_caps, support_mask) == 24, "sharp_coll_caps layout");
static_assert(offsetof(sharp_coll_caps, resources) == 88, "sharp_coll_caps layout");
#endif

// The library's soname major version (libsharp_coll.so.<N>) from which on the layouts above
// hold: 5 is the name the SHARP 3.x libraries carry and the one nccl-rdma-sharp-plugins dlopens
// when the unversioned name is absent; 4 belongs to the SHARP 2.x libraries of older HPC-X
// stacks (hcoll of that era asks for libsharp_coll.so.4).
constexpr int kMinSoVersion = 5;
constexpr const char* kCheckedAgainst = "SHARP 3.x (libsharp_coll.so.5)";

// The functions, as the library exports them (C linkage; resolved by name with dlsym).
using sharp_coll_init_fn = int (*)(sharp_coll_init_spec*, sharp_coll_context**);
using sharp_coll_finalize_fn = int (*)(sharp_coll_context*);
using sharp_coll_comm_init_fn = int (*)(sharp_coll_context*, sharp_coll_comm_init_spec*,
                                        sharp_coll_comm**);
using sharp_coll_comm_destroy_fn = int (*)(sharp_coll_comm*);
using sharp_coll_reg_mr_fn = int (*)(sharp_coll_context*, void*, size_t, void**);
using sharp_coll_dereg_mr_fn = int (*)(sharp_coll_context*, void*);
using sharp_coll_do_allreduce_nb_fn = int (*)(sharp_coll_comm*, sharp_coll_reduce_spec*, void**);
using sharp_coll_req_test_fn = int (*)(void*);  // non-zero once complete
using sharp_coll_req_wait_fn = int (*)(void*);  // status of a request; frees it
using sharp_coll_req_free_fn = int (*)(void*);
using sharp_coll_strerror_fn = const char* (*)(int);
using sharp_coll_caps_query_fn = int (*)(sharp_coll_context*, sharp_coll_caps*);

}  // namespace nezha::sharp

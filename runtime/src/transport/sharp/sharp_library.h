// libsharp_coll.so, loaded at run time (dlopen) and unloaded with the last SHARP rail that uses
// it. The library is part of vendor stacks (HPC-X, DOCA/MLNX_OFED), not of any distribution
// registry, so libnezha never links it: a job asking for a `sharp` rail on a node without it
// gets a ConfigError that names the rail and the library, instead of a loader failure at start.
#pragma once

#include <memory>
#include <string>

#include "transport/sharp/sharp_api.h"

namespace nezha::sharp {

class SharpLibrary {
 public:
  // The default name, found through the dynamic loader's search path (LD_LIBRARY_PATH, ld.so
  // cache). NEZHA_SHARP_LIBRARY overrides it with a file name or path.
  static constexpr const char* kDefaultName = "libsharp_coll.so";

  // Loads `path` (or the default) and resolves every function below and the default
  // configuration; throws ConfigError naming `rail` and the library when it is absent, lacks a
  // symbol, or is older than the version the layouts were checked against (sharp_api.h:
  // kMinSoVersion; the error names the library's soname and that version).
  static std::shared_ptr<SharpLibrary> load(const std::string& rail, const std::string& path);
  ~SharpLibrary();
  SharpLibrary(const SharpLibrary&) = delete;
  SharpLibrary& operator=(const SharpLibrary&) = delete;

  const std::string& path() const { return path_; }
  // The loaded file's soname, e.g. "libsharp_coll.so.5".
  const std::string& soname() const { return soname_; }
  // Text of a SHARP status code (the library's own, when it has one).
  std::string errorText(int status) const;

  sharp_coll_init_fn init = nullptr;
  sharp_coll_finalize_fn finalize = nullptr;
  sharp_coll_comm_init_fn commInit = nullptr;
  sharp_coll_comm_destroy_fn commDestroy = nullptr;
  sharp_coll_reg_mr_fn regMr = nullptr;
  sharp_coll_dereg_mr_fn deregMr = nullptr;
  sharp_coll_do_allreduce_nb_fn allreduceNb = nullptr;
  sharp_coll_req_test_fn reqTest = nullptr;
  sharp_coll_req_wait_fn reqWait = nullptr;
  sharp_coll_req_free_fn reqFree = nullptr;
  sharp_coll_strerror_fn strError = nullptr;
  sharp_coll_caps_query_fn capsQuery = nullptr;
  const sharp_coll_config* defaultConfig = nullptr;  // the library's sharp_coll_default_config

 private:
  SharpLibrary() = default;
  void* handle_ = nullptr;
  std::string path_, soname_;
};

// The soname's major version ("libsharp_coll.so.5" -> 5), or -1 when it has none.
int sonameMajor(const std::string& soname);

}  // namespace nezha::sharp

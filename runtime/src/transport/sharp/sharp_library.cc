#include "transport/sharp/sharp_library.h"

#include <dlfcn.h>

#include "base/error.h"

namespace nezha::sharp {

std::shared_ptr<SharpLibrary> SharpLibrary::load(const std::string& rail, const std::string& path) {
  const std::string name = path.empty() ? kDefaultName : path;
  std::shared_ptr<SharpLibrary> lib(new SharpLibrary());
  lib->path_ = name;
  // RTLD_LOCAL: its symbols stay out of the process's global namespace (a training framework
  // may carry its own SHARP-using plugin).
  lib->handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    const char* why = dlerror();
    throw ConfigError(strCat(
        "rail ", rail, ": transport \"sharp\" needs the NVIDIA SHARP collective library ", name,
        ", which could not be loaded (", why ? why : "not found",
        "). It ships with HPC-X / DOCA-OFED, not with libnezha: install it on the node (or mount "
        "it into the pod) and put its directory on LD_LIBRARY_PATH, or set NEZHA_SHARP_LIBRARY to "
        "its path"));
  }
  auto resolve = [&](auto& fn, const char* symbol) {
    dlerror();
    void* p = dlsym(lib->handle_, symbol);
    if (p == nullptr) {
      throw ConfigError(strCat("rail ", rail, ": ", name, " has no symbol ", symbol,
                               " (not a SHARP collective library, or one older than SHARP 2.x)"));
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  resolve(lib->init, "sharp_coll_init");
  resolve(lib->finalize, "sharp_coll_finalize");
  resolve(lib->commInit, "sharp_coll_comm_init");
  resolve(lib->commDestroy, "sharp_coll_comm_destroy");
  resolve(lib->regMr, "sharp_coll_reg_mr");
  resolve(lib->deregMr, "sharp_coll_dereg_mr");
  resolve(lib->allreduceNb, "sharp_coll_do_allreduce_nb");
  resolve(lib->reqTest, "sharp_coll_req_test");
  resolve(lib->reqWait, "sharp_coll_req_wait");
  resolve(lib->reqFree, "sharp_coll_req_free");
  resolve(lib->strError, "sharp_coll_strerror");
  return lib;
}

SharpLibrary::~SharpLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::string SharpLibrary::errorText(int status) const {
  const char* s = strError ? strError(status) : nullptr;
  return strCat(s ? s : "SHARP error", " (", status, ")");
}

}  // namespace nezha::sharp

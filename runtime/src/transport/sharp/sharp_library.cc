#include "transport/sharp/sharp_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>

#include "base/error.h"

namespace nezha::sharp {

namespace {

// DT_SONAME of a loaded object, from its dynamic section as the loader mapped it. glibc
// relocates DT_STRTAB in place on most targets and leaves it file-relative on others, hence
// the comparison with the load address.
std::string sonameOf(void* handle) {
  link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || lm == nullptr || lm->l_ld == nullptr) return "";
  ElfW(Addr) strtab = 0;
  ElfW(Addr) soname = 0;
  bool hasSoname = false;
  for (const ElfW(Dyn)* d = lm->l_ld; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
    if (d->d_tag == DT_SONAME) {
      soname = d->d_un.d_val;
      hasSoname = true;
    }
  }
  if (!hasSoname || strtab == 0) return "";
  if (strtab < lm->l_addr) strtab += lm->l_addr;
  return reinterpret_cast<const char*>(strtab + soname);
}

}  // namespace

int sonameMajor(const std::string& soname) {
  const std::string marker = ".so.";
  const size_t at = soname.rfind(marker);
  if (at == std::string::npos) return -1;
  const char* digits = soname.c_str() + at + marker.size();
  char* end = nullptr;
  const long v = std::strtol(digits, &end, 10);
  if (end == digits || (*end != '\0' && *end != '.') || v < 0 || v > 1000) return -1;
  return static_cast<int>(v);
}

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
  resolve(lib->capsQuery, "sharp_coll_caps_query");
  resolve(lib->defaultConfig, "sharp_coll_default_config");
  // The structs of sharp_api.h are SHARP 3.x's: an older library would read them (and number
  // the datatypes) differently, so it is refused here rather than misread at the first call.
  lib->soname_ = sonameOf(lib->handle_);
  const int major = sonameMajor(lib->soname_);
  if (major < kMinSoVersion) {
    throw ConfigError(
        strCat("rail ", rail, ": ", name, " is ",
               lib->soname_.empty() ? std::string("a library without a versioned soname")
                                    : strCat(lib->soname_, " (soname version ", major, ")"),
               ", older than ", kCheckedAgainst,
               ", the version libnezha's SHARP struct layouts were checked against: use the SHARP "
               "3.x library of HPC-X / DOCA-OFED"));
  }
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

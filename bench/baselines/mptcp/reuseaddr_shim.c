// LD_PRELOAD shim for the DDP benchmark's gloo-mptcp baseline (bench/run_ddp_bench.py).
//
// torch's bundled Gloo calls setsockopt(SO_REUSEADDR) on every *accepted* socket and aborts when
// it fails. Linux MPTCP rejects that option on an accepted MPTCP socket with EINVAL (seen on
// 6.18; plain TCP accepts it, where it has no effect on a connected socket anyway), so
// `mptcpize run` alone kills torch's gloo at connect time. This shim turns exactly that failure
// (SOL_SOCKET/SO_REUSEADDR, EINVAL, on an IPPROTO_MPTCP socket) into success and leaves every
// other call untouched. It does not change what goes over the wire.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

typedef int (*setsockopt_fn)(int, int, int, const void*, socklen_t);

int setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  static setsockopt_fn real;
  if (!real) {
    real = (setsockopt_fn)dlsym(RTLD_NEXT, "setsockopt");
  }
  int rv = real(fd, level, name, value, len);
  if (rv == -1 && errno == EINVAL && level == SOL_SOCKET && name == SO_REUSEADDR) {
    int proto = 0;
    socklen_t plen = sizeof(proto);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &plen) == 0 && proto == IPPROTO_MPTCP) {
      return 0;
    }
    errno = EINVAL;
  }
  return rv;
}

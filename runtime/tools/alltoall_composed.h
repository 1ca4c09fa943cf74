// The alltoallv libnezha had before it got its own data path: an allgather
// of every rank's whole send buffer, from which each rank keeps its blocks (n x the bytes a
// real alltoall moves), after an allgather of the counts and an allreduce of the check. Kept
// only as nezha-bench's baseline (--vs-composed), built from the public API alone.
#pragma once

#include <cstddef>

#include "nezha/nezha.hpp"

namespace nezha::tools {

void composedAlltoallv(Communicator& c, const void* sendbuf, const size_t* sendcounts,
                       const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                       const size_t* rdispls, DataType dtype);

}  // namespace nezha::tools

// rank_process.h: the rendezvous address and the process group of one rank. On cuda the product
// path, NCCL (rank 0 makes the id and hands it over through the bootstrap, dist/bootstrap.h); on
// the cpu the TCP group (dist/socket_group.h), the same collective contract over loopback or a
// network.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "dsa/cli/command_line.h"
#include "dsa/cli/rank_process.h"
#include "dsa/dist/bootstrap.h"
#include "dsa/dist/device_collective.h"
#include "dsa/dist/launcher.h"
#include "dsa/dist/socket_group.h"
#include "dsa/dist/tcp.h"
#include "dsa/engine/dp_engine_group.h"

#if DSA_HAVE_NCCL
#include <cuda_runtime.h>

#include "dsa/cuda/device_info.h"
#include "dsa/dist/nccl_group.h"
#endif

namespace dsa::cli {

namespace {

#if DSA_HAVE_NCCL
StatusOr<std::unique_ptr<dist::Collective>> nccl_rank_group(const dist::RankEnvironment& env,
                                                            const dist::InitAddr& addr,
                                                            uint64_t flags_hash) {
  const int devices = cuda::device_count();
  if (env.local_rank >= devices) {
    return failed_precondition(fmt::format(
        "rank {}: local rank {} needs GPU {}, but {} GPU(s) are visible (--dp-size is at most the "
        "GPUs of the node; CUDA_VISIBLE_DEVICES chooses them)",
        env.rank, env.local_rank, env.local_rank, devices));
  }
  // Before anything touches CUDA in this process: every later context is on this GPU.
  if (const cudaError_t e = cudaSetDevice(env.local_rank); e != cudaSuccess) {
    return internal_error(fmt::format("rank {}: cudaSetDevice({}): {}", env.rank, env.local_rank,
                                      cudaGetErrorString(e)));
  }
  dist::NcclId id{};
  if (env.rank == 0) {
    DSA_ASSIGN_OR_RETURN(id, dist::nccl_unique_id());
  }
  dist::BootstrapConfig bc;
  bc.addr = addr;
  bc.rank = env.rank;
  bc.world_size = env.world_size;
  bc.flags_hash = flags_hash;
  DSA_ASSIGN_OR_RETURN(id, dist::exchange_unique_id(bc, id));
  DSA_ASSIGN_OR_RETURN(std::unique_ptr<dist::NcclGroup> g,
                       dist::NcclGroup::create(env.rank, env.world_size, id,
                                               std::chrono::milliseconds(engine::kDpWatchdog)));
  return std::unique_ptr<dist::Collective>(std::move(g));
}
#endif

}  // namespace

NodeRanks node_ranks(const EngineSetup& setup) {
  NodeRanks n;
  n.local = setup.dp_size / setup.dist.nnodes;
  n.first = setup.dist.node_rank * n.local;
  n.per = setup.backend == kernels::Backend::kCuda ? "GPU" : "rank";
  return n;
}

Status launch_node_ranks(const EngineSetup& setup) {
  const std::vector<std::string>& argv = command_line();
  if (argv.empty()) return internal_error("--dp-processes: the command line was not recorded");
  dist::LaunchConfig lc;
  lc.local_world_size = node_ranks(setup).local;
  lc.node_rank = setup.dist.node_rank;
  lc.nnodes = setup.dist.nnodes;
  lc.argv = argv;
  return dist::launch_local_ranks(lc);
}

Status adapt_to_rank_process(const EngineSetup& setup, dist::Collective& group,
                             model::ModelOptions* mo) {
  if (setup.backend != kernels::Backend::kCuda) mo->mem_fraction_static /= double(setup.dp_size);
  if (setup.ep_size > 1) {
    auto* device_group = dynamic_cast<dist::DeviceCollective*>(&group);
    if (device_group == nullptr) {
      return internal_error("--ep-size: this rank's process group has no MoE collectives");
    }
    mo->ep_rank = group.rank();
    mo->ep_size = setup.ep_size;
    mo->ep_group = device_group;
  }
  return ok_status();
}

StatusOr<std::string> export_init_addr(const EngineSetup& setup) {
  std::string addr;
  if (setup.dist.init_addr) {
    addr = fmt::format("{}:{}", setup.dist.init_addr->host, setup.dist.init_addr->port);
  } else {
    // Rank 0 binds it a moment later; another program taking it in between makes rank 0 fail to
    // listen, named, and the run stops (--dist-init-addr chooses the port).
    DSA_ASSIGN_OR_RETURN(const int32_t port, dist::tcp::free_loopback_port());
    addr = fmt::format("127.0.0.1:{}", port);
  }
  ::setenv(kEnvInitAddr, addr.c_str(), 1);
  return addr;
}

StatusOr<std::unique_ptr<dist::Collective>> join_rank_group(const dist::RankEnvironment& env,
                                                            const EngineSetup& setup,
                                                            uint64_t flags_hash) {
  if (env.world_size != setup.dp_size) {
    return invalid_argument(fmt::format(
        "{} = {} but --dp-size = {}: a rank process must be started by the dsa launcher with the "
        "same flags",
        dist::kEnvWorldSize, env.world_size, setup.dp_size));
  }
  const char* addr = std::getenv(kEnvInitAddr);
  if (addr == nullptr) {
    return invalid_argument(
        fmt::format("{} must be set in a rank process (the dsa launcher sets it)", kEnvInitAddr));
  }
  return make_rank_group(env, setup, addr, flags_hash);
}

StatusOr<std::unique_ptr<dist::Collective>> make_rank_group(const dist::RankEnvironment& env,
                                                            const EngineSetup& setup,
                                                            const std::string& init_addr,
                                                            uint64_t flags_hash) {
  DSA_ASSIGN_OR_RETURN(const dist::InitAddr addr, dist::parse_init_addr(init_addr));
  if (setup.backend == kernels::Backend::kCuda) {
#if DSA_HAVE_NCCL
    return nccl_rank_group(env, addr, flags_hash);
#else
    return unimplemented(
        "--device cuda with one process per rank needs NCCL, and this build has none (the CUDA "
        "toolkit's libnccl was not found at configure time)");
#endif
  }
  dist::SocketGroupConfig c;
  c.addr = addr;
  c.rank = env.rank;
  c.world_size = env.world_size;
  c.flags_hash = flags_hash;
  // The same watchdog as the in-process ranks: a CPU forward of a large model's prefill chunk
  // takes minutes, and a rank missing a collective this long ends the run instead of hanging.
  c.timeout = std::chrono::milliseconds(engine::kDpWatchdog);
  DSA_ASSIGN_OR_RETURN(std::unique_ptr<dist::SocketGroup> g, dist::SocketGroup::create(c));
  return std::unique_ptr<dist::Collective>(std::move(g));
}

}  // namespace dsa::cli

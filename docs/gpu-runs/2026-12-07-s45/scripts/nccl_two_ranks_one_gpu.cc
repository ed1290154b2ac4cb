// Issue 18's "several processes on the one GPU if NCCL allows it": two processes, both on GPU 0,
// try to form one NCCL communicator (world size 2) and run one all-reduce. dsa itself never maps
// two ranks to one GPU (cli/rank_group.cc refuses a local rank without its own GPU); this asks
// NCCL directly what it does. Build: nvcc -o t nccl_two_ranks_one_gpu.cc -lnccl. Prints each
// rank's result of ncclCommInitRank and, if that succeeded, of the all-reduce.
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

static int rank_main(int rank, ncclUniqueId id) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // the child leaves by _exit: nothing may stay buffered
  if (cudaSetDevice(0) != cudaSuccess) return 10;
  ncclComm_t comm;
  const ncclResult_t init = ncclCommInitRank(&comm, 2, id, rank);
  std::printf("rank %d: ncclCommInitRank -> %d (%s): %s\n", rank, int(init),
              ncclGetErrorString(init), ncclGetLastError(nullptr));
  if (init != ncclSuccess) return 1;
  float* d = nullptr;
  cudaMalloc(&d, sizeof(float));
  const float one = float(rank + 1);
  cudaMemcpy(d, &one, sizeof(float), cudaMemcpyHostToDevice);
  const ncclResult_t ar = ncclAllReduce(d, d, 1, ncclFloat, ncclSum, comm, nullptr);
  const cudaError_t sync = cudaDeviceSynchronize();
  float sum = 0;
  cudaMemcpy(&sum, d, sizeof(float), cudaMemcpyDeviceToHost);
  std::printf("rank %d: ncclAllReduce -> %d (%s), sync %s, sum %.1f (want 3.0)\n", rank, int(ar),
              ncclGetErrorString(ar), cudaGetErrorString(sync), sum);
  ncclCommDestroy(comm);
  return ar == ncclSuccess && sum == 3.0f ? 0 : 2;
}

int main() {
  // The id is made before any fork and before this process touches a device context.
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 3;
  pid_t kids[2];
  for (int r = 0; r < 2; ++r) {
    kids[r] = fork();
    if (kids[r] == 0) _exit(rank_main(r, id));
  }
  int worst = 0;
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    waitpid(kids[r], &st, 0);
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
    std::printf("rank %d exited %d\n", r, code);
    if (code > worst) worst = code;
  }
  return worst;
}
